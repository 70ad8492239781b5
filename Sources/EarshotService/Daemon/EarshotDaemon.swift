import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs

/// `earshotd` wired together: capture (ALSA or a real-time input) -> lock-free ring -> analysis queue (gate,
/// sliding-window YAMNet, debouncer) -> Unix socket subscribers, the journal and, with `--foreground`, stdout.
///
/// Lifecycle: `READY=1` once audio flows (the first chunk read from the ring); watchdog pings while the analysis
/// queue keeps polling; SIGTERM/SIGINT stop gracefully (open events end, `STOPPING=1`, the socket file is removed,
/// exit 0); SIGHUP reloads the configuration file (groups, thresholds, window, gate; the device and the socket path
/// need a restart); the end of an `--input` file or stdin scores the last window, ends open events and exits 0.
///
/// - Important: Create it on the main thread after `SignalHandling.blockSignals()`, then call `run()`, which never
///   returns.
public final class EarshotDaemon: @unchecked Sendable {
    /// Audio the capture ring holds at least, in seconds at 48 kHz mono (rounded up to a power of two: 2^18 samples,
    /// 1 MB, 5.46 s at 48 kHz, 16.4 s at 16 kHz): how long the analysis queue may stall (a slow first inference, a
    /// reload, a busy machine) before the capture thread drops audio and says so. One inference takes about 2 ms,
    /// and the queue is woken every capture period (0.2 s); the ring was 8 s (2 MB resident) before peak RSS mattered.
    package static let ringSeconds = 4

    private let commandLine: DaemonCommandLine
    private var configuration: DaemonConfiguration
    /// The capture settings at start; they never change while running (a reload that changes them says a restart
    /// is needed), so the supervisor's queue may read them while the control queue reloads.
    private let capture: DaemonConfiguration.Capture
    /// The output settings at start (socket path and mode, queue size, journal), likewise fixed until a restart.
    private let output: DaemonConfiguration.Output
    /// Set once `--fallback-input` replaced a device that could not be opened.
    private let usingFallback = Atomic<Bool>(false)
    private let control = DispatchQueue(label: "earshot.control")
    private let analysisQueue = DispatchQueue(label: "earshot.analysis", qos: .userInitiated)
    private let audioArrived: AudioArrivedSignal
    private let notifier = ServiceNotifier()
    private let journal: JournalSink
    private let ring: SampleRingBuffer
    private var server: EventServer!
    private var pipeline: AnalysisPipeline!
    private var supervisor: CaptureSupervisor!
    private var signals: SignalSources?
    private var watchdog: ServiceWatchdog?
    private let startTime = Date()
    private let status = Mutex(StatusSnapshot())
    /// Monotonic nanoseconds of the analysis queue's last poll, for the watchdog.
    private let heartbeat = Atomic<UInt64>(DispatchTime.now().uptimeNanoseconds)
    private let deviceHasWorked = Atomic<Bool>(false)
    private let printLock = Mutex(())
    /// Finished events to the SQLite history (`[history]`; nil when disabled). Its settings need a restart.
    private var history: HistoryRecorder?
    private let historySettings: DaemonConfiguration.History
    /// Audio around each detection (`[clips]`; nil when disabled): cut on the analysis queue, written on the
    /// writer's. Its settings need a restart.
    private var clips: ClipRecorder?
    private var clipWriter: ClipWriter?
    private let clipSettings: DaemonConfiguration.Clips
    /// Sleep sessions and snore reports (`[sleep]`).
    private var sleep: SleepService!
    /// The custom models running (`[models] files`); replaced on reload (control queue).
    private var heads = HeadModelSet()

    package struct StatusSnapshot {
        package var capture = "opening"
        package var source = ""
        package var windows = 0
        package var gatedWindows = 0
        package var gaps = 0
        package var streamTime: Double = 0
        package var levelDBFS: Float = ClassificationResult.levelFloorDBFS
        package var activeGroups: [String] = []
        package var detections = 0
        package var gateDBFS: Double = 0
        package var watch: [String] = []
        /// The custom models running: name and file.
        package var models: [(name: String, path: String)] = []
    }

    /// Loads the configuration and the model, checks the groups, and opens the socket.
    /// - Throws: `EarshotError` `.config` (bad file or class names, a `[history] path` or `[clips] directory` of
    ///   the wrong kind: ``DaemonConfiguration/checkStoragePaths()``), `.noInput` (model files missing), `.system` or
    ///   `.unavailable` (the socket cannot be created, another daemon listens on it).
    public init(commandLine: DaemonCommandLine) throws(EarshotError) {
        self.commandLine = commandLine
        configuration = try DaemonConfiguration.load(path: commandLine.configPath, overrides: commandLine.overrides)
        try configuration.checkStoragePaths()
        capture = configuration.capture
        output = configuration.output
        historySettings = configuration.history
        clipSettings = configuration.clips
        BLASThreads.set(1)
        let model = try BuiltInClassifier.shared()
        let heads = try HeadModelSet.load(paths: configuration.models.files, locations: configuration.modelLocations).set
        self.heads = heads
        let classLabels = model.classLabels + heads.classLabels
        let groups = try configuration.resolvedGroups(classLabels: classLabels)
        let engine = try DetectionEngine(
            groups: groups,
            watchList: AlarmDetector.engineWatchList(groups.map(\.name), patternDetection: configuration.alarms.patternDetection),
            classLabels: classLabels)
        journal = configuration.output.journal && !commandLine.foreground
            ? JournalSink() : JournalSink(journalSocketPath: "/nonexistent")
        // See `ringSeconds`. Each write wakes the analysis queue (see AnalysisPipeline).
        let signal = AudioArrivedSignal(queue: analysisQueue)
        audioArrived = signal
        ring = SampleRingBuffer(minimumCapacity: Self.ringSeconds * 48_000, didWrite: { signal.raise() })
        let subscribable = groups.map(\.name) + [SnoreDetector.groupName]
            + AlarmDetector.extraGroups(watch: groups.map(\.name), patternDetection: configuration.alarms.patternDetection)
        server = try EventServer(
            configuration: EventServer.Configuration(
                path: output.socketPath, mode: output.socketMode, clientQueueLimitBytes: output.clientQueueBytes,
                maxClients: output.maxClients, knownGroups: subscribable,
                unwatchedGroups: configuration.unwatchedGroups(subscribable: subscribable, configPath: commandLine.configPath)),
            status: { [unowned self] in statusObject() })
        noteSettings(configuration)
        noteModels(heads)
        if historySettings.enabled {
            history = HistoryRecorder(settings: historySettings) { [unowned self] report in historyReport(report) }
        }
        sleep = SleepService(
            analysisQueue: analysisQueue, classLabels: model.classLabels, settings: configuration.sleep,
            publish: { [unowned self] event in emit(.detection(event)) },
            publishReport: { [unowned self] object in server.publish(object: object, group: nil) },
            log: { [journal] line, priority in journal.log(line, priority: priority) })
        server.register(commands: SleepService.commands) { [unowned self] command in sleep.handle(command: command) }
        do {
            pipeline = try AnalysisPipeline(
                queue: analysisQueue, ring: ring, analysis: configuration.analysis, engine: engine, heads: heads,
                emit: { [unowned self] output in
                    // During a sleep session the snore detector speaks for the plain "snoring" group.
                    if case .detection(let event) = output, !sleep.admits(event) { return }
                    emit(output)
                },
                onFirstAudio: { [unowned self] in audioStarted() })
        } catch {
            server.stop()
            throw error
        }
        pipeline.configureAlarms(enabled: configuration.alarms.patternDetection, watch: configuration.detection.watch)
        for line in heads.notes(windowDuration: configuration.analysis.windowDuration) { journal.log(line) }
        pipeline.onWindow = { [unowned self] result in
            history?.observe(result)
            sleep.observe(result)
        }
        if clipSettings.enabled {
            let writer = ClipWriter(
                settings: clipSettings,
                report: { [unowned self] report in clipReport(report) },
                saved: { [unowned self] clip in clipSaved(clip) })
            let recorder = ClipRecorder(settings: clipSettings) { clip in writer.save(clip) }
            clipWriter = writer
            clips = recorder
            pipeline.onResampledAudio = { samples, index in recorder.append(samples, at: index) }
            let groups = clipSettings.groups.isEmpty ? "every group" : clipSettings.groups.joined(separator: ", ")
            journal.log("saving clips of \(groups) to \(clipSettings.directory): \(SettingRules.format(clipSettings.preSeconds)) s before each event to \(SettingRules.format(clipSettings.postSeconds)) s after its end, keeping at most \(clipSettings.maxClips) for \(clipSettings.retentionDays) days")
        }
        supervisor = CaptureSupervisor(
            ring: ring, callbackQueue: control,
            open: { [unowned self] in try openSource() },
            onStateChange: { [unowned self] state in captureStateChanged(state) })
    }

    /// Starts capture, analysis, signal handling and the watchdog, then runs the main dispatch loop forever.
    public func run() -> Never {
        signals = SignalHandling.install(
            queue: control,
            onTerminate: { [unowned self] signal in shutdown(reason: "signal \(signal)", status: 0) },
            onReload: { [unowned self] in reload() })
        // Until Dispatch has installed its handlers, a signal landing on a thread that does not block it (OpenBLAS's,
        // started before main) takes its default action: nothing below may announce the daemon before that.
        if signals?.waitUntilRegistered(timeout: .now() + 5) == false {
            journal.log("signal handlers not registered within 5 s: an early SIGHUP or SIGTERM may end the daemon", priority: 4)
        }
        if configuration.daemon.watchdog {
            do {
                watchdog = try ServiceWatchdog(
                    queue: control, notifier: notifier,
                    isHealthy: { [unowned self] in
                        DispatchTime.now().uptimeNanoseconds - heartbeat.load(ordering: .relaxed) < 5_000_000_000
                    },
                    onError: { [journal] error in journal.log("watchdog: \(error.message)") })
            } catch {
                journal.log("watchdog disabled: \(error.message)")
            }
        }
        analysisQueue.async { [self] in pipeline.start(audioArrived: audioArrived) }
        sleep.startSchedule()
        let heartbeatTimer = DispatchSource.makeTimerSource(queue: analysisQueue)
        heartbeatTimer.schedule(deadline: .now(), repeating: .seconds(1))
        heartbeatTimer.setEventHandler { [unowned self] in
            heartbeat.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
            updateStatus()
        }
        heartbeatTimer.resume()
        supervisor.start()
        _ = try? notifier.status("opening \(sourceDescription)")
        withExtendedLifetime(heartbeatTimer) { dispatchMain() }
    }

    private var sourceDescription: String {
        if usingFallback.load(ordering: .relaxed), let fallback = commandLine.fallbackInput { return "input file \(fallback)" }
        return switch capture.input {
        case .file(let path): "input file \(path)"
        case .standardInput: "raw input on standard input"
        case nil: "capture device \"\(capture.device)\""
        }
    }

    // MARK: Capture

    private func openSource() throws -> any CaptureSource {
        if usingFallback.load(ordering: .relaxed), let fallback = commandLine.fallbackInput {
            return try RealtimeFileSource(path: fallback)
        }
        switch capture.input {
        case .file(let path):
            return try RealtimeFileSource(path: path)
        case .standardInput:
            return try RealtimeFileSource(path: RealtimeFileSource.standardInputName, rawSampleRate: capture.inputSampleRate)
        case nil:
            do {
                return try PCMCapture(configuration: CaptureConfiguration(device: capture.device))
            } catch {
                guard let fallback = commandLine.fallbackInput, !deviceHasWorked.load(ordering: .relaxed) else { throw error }
                let line = (error as? EarshotError)?.message ?? "\(error)"
                journal.log("\(line); streaming \(fallback) through the live pipeline instead")
                usingFallback.store(true, ordering: .relaxed)
                return try RealtimeFileSource(path: fallback)
            }
        }
    }

    private func captureStateChanged(_ state: CaptureSupervisor.State) {
        switch state {
        case .opening, .stopped:
            break
        case .running(let name, let format):
            if capture.input == nil, !usingFallback.load(ordering: .relaxed) { deviceHasWorked.store(true, ordering: .relaxed) }
            status.withLock { $0.capture = "live"; $0.source = "\(name) (\(format))" }
            emit(.health(HealthEvent(state: .captureLive, message: "capturing from \(name): \(format)",
                                     details: ["source": .string(name)])))
        case .unavailable(let error) where capture.input != nil || usingFallback.load(ordering: .relaxed):
            // A file or stdin that cannot be opened or read will not get better by retrying (and a retry would
            // replay a file from its start): analyse what arrived, say why, and exit with the error's status.
            journal.log(error.message, priority: 3)
            analysisQueue.sync { pipeline.finishInput() }
            shutdown(reason: "input failed", status: error.exitStatus)
        case .unavailable(let error):
            let retry = supervisor.nextRetryDelay.map { " (retrying in \(Int($0.rounded())) s)" } ?? ""
            status.withLock { $0.capture = "unavailable" }
            emit(.health(HealthEvent(state: .captureUnavailable, message: error.message + retry)))
            _ = try? notifier.status("waiting for \(sourceDescription): \(error.message)")
        case .finished:
            analysisQueue.sync { pipeline.finishInput() }
            shutdown(reason: "end of input", status: 0)
        }
    }

    private func audioStarted() {
        do {
            try notifier.ready(status: "listening to \(sourceDescription)")
        } catch {
            journal.log("sd_notify: \(error.message)")
        }
    }

    // MARK: Events

    private func emit(_ output: AnalysisPipeline.PipelineOutput) {
        let object: JSONObject
        switch output {
        case .detection(let event):
            server.publish(event)
            journal.record(event)
            history?.record(event)
            clips?.observe(event)
            if case .onset = event { status.withLock { $0.detections += 1 } }
            object = EventJSON.object(for: event, time: Date())
        case .alarm(let alarm):
            object = alarm.object(wallClock: Date())
            server.publish(object: object, group: alarm.group)
            journal.record(fields: alarm.journalFields(identifier: journal.identifier))
            clips?.observe(alarm)
            if alarm.kind == .onset { status.withLock { $0.detections += 1 } }
            // The history stores finished events: an alarm's end, or a chirp (a point event with no end).
            if alarm.kind == .end || alarm.group == AlarmEvent.alarmChirp, case .offset(let finished) = alarm.finishedEvent {
                history?.recordFinished(
                    group: finished.group, classLabel: finished.classLabel, start: finished.start, end: finished.end,
                    peakConfidence: finished.peakConfidence, meanConfidence: finished.meanConfidence,
                    windows: finished.positiveWindows, endReason: finished.reason)
            }
        case .health(let health):
            server.publish(health)
            journal.record(health)
            object = EventJSON.object(for: health, time: Date())
        }
        if commandLine.foreground {
            let line = JSONValue.object(object).encoded + "\n"
            _ = printLock.withLock { _ in writeAll(STDOUT_FILENO, line) }
        }
    }

    /// The history writer's news: a failure is a health event (once), a recovery a journal line.
    private func historyReport(_ report: EventHistoryWriter.Report) {
        switch report {
        case .failing(let line): emit(.health(HealthEvent(state: .historyUnavailable, message: line)))
        case .recovered(let line): journal.log(line)
        }
    }

    /// The clip writer's news: a failure is a health event (once), a recovery or a warning a journal line.
    private func clipReport(_ report: ClipWriter.Report) {
        switch report {
        case .failing(let line): emit(.health(HealthEvent(state: .clipsUnavailable, message: line)))
        case .recovered(let line): journal.log(line)
        case .warning(let line): journal.log(line, priority: 4)
        }
    }

    /// A clip is on disk: a `clip_saved` line for the group's subscribers (and stdout), and a journal line.
    private func clipSaved(_ clip: SavedClip) {
        let object = clip.object(time: Date())
        server.publish(object: object, group: clip.group)
        journal.record(fields: clip.journalFields(identifier: journal.identifier))
        if commandLine.foreground {
            let line = JSONValue.object(object).encoded + "\n"
            _ = printLock.withLock { _ in writeAll(STDOUT_FILENO, line) }
        }
    }

    private func updateStatus() {
        let counters = pipeline.counters
        let active = pipeline.activeGroups
        status.withLock {
            $0.windows = counters.windows
            $0.gatedWindows = counters.gatedWindows
            $0.gaps = counters.gaps
            $0.streamTime = counters.streamTime
            $0.levelDBFS = counters.lastLevelDBFS
            $0.activeGroups = active
        }
    }

    /// Copies the settings the status reply shows, so that the server queue never reads `configuration`.
    private func noteSettings(_ settings: DaemonConfiguration) {
        status.withLock {
            $0.gateDBFS = settings.analysis.gateThresholdDBFS
            $0.watch = settings.detection.watch
        }
    }

    private func statusObject() -> JSONObject {
        let snapshot = status.withLock { $0 }
        return [
            "type": "status",
            "uptime": .number(Date().timeIntervalSince(startTime), decimals: 1),
            "capture": .string(snapshot.capture),
            "source": .string(snapshot.source),
            "xruns": .int(supervisor.xrunCount),
            "frames_captured": .int(Int(supervisor.framesCaptured)),
            "gaps": .int(snapshot.gaps),
            "windows": .int(snapshot.windows),
            "gated_windows": .int(snapshot.gatedWindows),
            "stream_time": .number(snapshot.streamTime, decimals: 3),
            "level_dbfs": .number(Double(snapshot.levelDBFS), decimals: 1),
            "gate_dbfs": .number(snapshot.gateDBFS, decimals: 1),
            "watch": .array(snapshot.watch.map { .string($0) }),
            "active": .array(snapshot.activeGroups.map { .string($0) }),
            "detections": .int(snapshot.detections),
            "models": .array(snapshot.models.map { .object(["name": .string($0.name), "path": .string($0.path)]) }),
        ]
    }

    /// Copies the running custom models' names and files for the status reply.
    private func noteModels(_ set: HeadModelSet) {
        let models = set.models.map { (name: $0.name, path: $0.path) }
        status.withLock { $0.models = models }
    }

    // MARK: Lifecycle

    private func reload() {
        _ = try? notifier.reloading(status: "reloading configuration")
        do {
            let fresh = try DaemonConfiguration.load(path: commandLine.configPath, overrides: commandLine.overrides)
            let model = try BuiltInClassifier.shared()
            let loaded = try HeadModelSet.load(paths: fresh.models.files, previous: heads, locations: fresh.modelLocations)
            let classLabels = model.classLabels + loaded.set.classLabels
            let groups = try fresh.resolvedGroups(classLabels: classLabels)
            let engine = try DetectionEngine(
                groups: groups,
                watchList: AlarmDetector.engineWatchList(groups.map(\.name), patternDetection: fresh.alarms.patternDetection),
                classLabels: classLabels)
            // What shapes events unchanged (window, gate, groups, alarms, the models' labels): open events go on
            // and the window grid stays; only reloaded model weights are swapped in.
            let eventsUnchanged = fresh.analysis == configuration.analysis && fresh.detection == configuration.detection
                && fresh.alarms == configuration.alarms && loaded.set.classLabels == heads.classLabels
            let failure: EarshotError? = analysisQueue.sync {
                do throws(EarshotError) {
                    if eventsUnchanged, pipeline.replaceHeads(loaded.set) { return nil }
                    try pipeline.reconfigure(analysis: fresh.analysis, engine: engine, heads: loaded.set)
                    pipeline.configureAlarms(enabled: fresh.alarms.patternDetection, watch: fresh.detection.watch)
                    return nil
                } catch {
                    return error
                }
            }
            if let failure { throw failure }
            heads = loaded.set
            noteModels(loaded.set)
            for line in loaded.problems { journal.log(line, priority: 4) }
            for line in loaded.set.notes(windowDuration: fresh.analysis.windowDuration) { journal.log(line) }
            let subscribable = groups.map(\.name) + [SnoreDetector.groupName]
                + AlarmDetector.extraGroups(watch: groups.map(\.name), patternDetection: fresh.alarms.patternDetection)
            server.setKnownGroups(
                subscribable,
                unwatched: fresh.unwatchedGroups(subscribable: subscribable, configPath: commandLine.configPath))
            var restartNeeded: [String] = []
            if fresh.capture != capture { restartNeeded.append("[capture]") }
            if fresh.output != output { restartNeeded.append("[output]") }
            if fresh.history != historySettings { restartNeeded.append("[history]") }
            if fresh.clips != clipSettings { restartNeeded.append("[clips]") }
            analysisQueue.async { [sleep] in sleep?.reconfigure(fresh.sleep) }
            configuration = fresh
            noteSettings(fresh)
            let note = restartNeeded.isEmpty ? "" : "; changes to \(restartNeeded.joined(separator: " and ")) take effect after a restart"
            journal.log("configuration reloaded: watching \(groups.map(\.name).joined(separator: ", "))\(note)")
        } catch {
            let line = (error as? EarshotError)?.message ?? "\(error)"
            journal.log("reload failed, keeping the running configuration: \(line)", priority: 3)
        }
        _ = try? notifier.ready(status: "listening to \(sourceDescription)")
    }

    private func shutdown(reason: String, status: Int32) {
        _ = try? notifier.stopping(status: "stopping: \(reason)")
        supervisor.stop()
        analysisQueue.sync {
            pipeline.stop()
            if sleep.isActive { sleep.stop(at: Date()) }
            // Clips still waiting for their post-roll end with the audio there is.
            clips?.finish()
        }
        sleep.flushReports()
        history?.close()
        if let writer = history?.writer, writer.statistics.backlog > 0 {
            let count = writer.statistics.backlog
            journal.log("\(count) finished event\(count == 1 ? " was" : "s were") not stored: the history \(writer.path) could not be written (see the history_unavailable message)", priority: 4)
        }
        clipWriter?.close()
        // Subscribers get the last events before the socket closes.
        sleepSeconds(0.2)
        server.stop()
        watchdog?.cancel()
        journal.log("stopped (\(reason))")
        exit(status)
    }
}
