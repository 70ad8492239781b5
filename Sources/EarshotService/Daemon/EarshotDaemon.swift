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

/// `earshotd` wired together: capture (ALSA or a real-time input) -> lock-free ring -> analysis queue (the
/// detection stage: gate, sliding-window YAMNet, heads, debouncer, alarm patterns) -> output router -> sinks (Unix
/// socket subscribers, the journal, the SQLite history and, with `--foreground`, stdout), each on its own queue.
///
/// Lifecycle: components start in dependency order (router and sinks, analysis, sleep schedule, capture) and stop
/// in reverse: `STOPPING=1`, capture stops, the analysis drains the ring and ends open events, clips in progress
/// are written, the router delivers everything routed and stops the sinks in reverse order (the history commits,
/// the socket sends `{"type":"shutdown"}` and its file is removed), then the process exits with the status.
/// `READY=1` once audio flows (the first chunk read from the ring), or once the daemon serves while it waits for a
/// capture device that cannot be opened yet (`STATUS=waiting for ...`); watchdog pings while the analysis queue keeps
/// polling; SIGTERM/SIGINT stop as above (exit 0); SIGHUP reloads the configuration file (groups, thresholds,
/// window, gate; the device and the socket path need a restart); the end of an `--input` file or stdin scores the
/// last window, ends open events and exits 0.
///
/// - Important: Create it on the main thread after `SignalHandling.blockSignals()`, then call `run()`, which never
///   returns.
package final class EarshotDaemon: @unchecked Sendable {
    /// Audio the capture ring holds at least, in seconds at 48 kHz mono (rounded up to a power of two: 2^18 samples,
    /// 1 MB, 5.46 s at 48 kHz, 16.4 s at 16 kHz): how long the analysis queue may stall (a slow first inference, a
    /// reload, a busy machine) before the capture thread drops audio and says so. One inference takes about 2 ms,
    /// and the queue is woken every capture period (0.2 s); the ring was 8 s (2 MB resident) before peak RSS mattered.
    static let ringSeconds = 4

    /// Seconds without audio, after audio has flowed, that make the capture `stalled` (an `input_stalled` health
    /// event): 5. Writers deliver far more often than that (`arecord` every period, 0.1-0.5 s; `sox` every 8 KB,
    /// 0.26 s at 16 kHz; an ALSA device every period), so 5 s is no normal pause, yet a sleep session or a
    /// subscriber learns of a hung writer within seconds, not in the morning.
    static let inputStallSeconds = 5.0
    /// Monotonic nanoseconds at which the capture stalled (control queue), for the recovery's message.
    private var stalledAt: UInt64?

    private let commandLine: DaemonCommandLine
    /// The running configuration; read and replaced on the control queue only.
    private var configuration: DaemonConfiguration
    /// The capture settings at start; they never change while running (a reload that changes them says a restart
    /// is needed), so the supervisor's queue may read them while the control queue reloads.
    private let capture: DaemonConfiguration.Capture
    /// The output settings at start (socket path and mode, queue size, journal), likewise fixed until a restart.
    private let output: DaemonConfiguration.Output
    /// `[history]` and `[clips]` at start (changes need a restart).
    private let historySettings: DaemonConfiguration.History
    private let clipSettings: DaemonConfiguration.Clips
    /// `[mqtt]` at start (changes need a restart).
    private let mqttSettings: DaemonConfiguration.MQTT
    /// `[notify]` at start. A reload applies its changes to the sink (``NotifySink/apply(_:)``), except turning
    /// notifications on or off (`url` set or not), which needs a restart.
    private let notifySettings: DaemonConfiguration.Notify
    /// Set once `--fallback-input` replaced a device that could not be opened.
    private let usingFallback = Atomic<Bool>(false)
    /// Set once READY=1 went to systemd (audio flowed, or the daemon began waiting for the device).
    private let readySent = Atomic<Bool>(false)
    /// Whether the first audio came from the ring (set on the analysis queue), and the `capture_live` of a standard
    /// input held until then (set on the control queue): standard input opens at once, whether or not its writer
    /// ever writes, so it is `waiting` (and the phone is not told "Listening") until audio arrives.
    private let firstAudio = Mutex<(flowed: Bool, heldLive: HealthEvent?)>((false, nil))
    private let control = DispatchQueue(label: "earshot.control")
    /// Where SIGTERM, SIGINT and SIGHUP arrive: a queue of their own, so that a reload (on `control`) that waits on a
    /// file or the analysis queue can never keep the daemon from stopping.
    private let signalQueue = DispatchQueue(label: "earshot.signals")
    /// Where a termination signal's stop runs: not `signalQueue`, which must stay free while the daemon starts (the
    /// signal sources' registration handlers, which `run()` waits for, run there) and the stop waits for the start.
    private let stopQueue = DispatchQueue(label: "earshot.stop")
    /// Set by the first shutdown (a signal, the end of the input): later ones and reloads do nothing.
    private let stopping = Atomic<Bool>(false)
    /// Entered at the top of `run()`, left once it has started everything: a stop waits for it and a reload is run
    /// after it, so that a SIGTERM or SIGHUP just after the start stops (or reloads) a complete daemon, every sink
    /// included, rather than racing the start.
    private let starting = DispatchGroup()
    /// The shutdown step running now, named in the line written if the stop deadline passes.
    private let stopStep = Mutex("starting to stop")
    private let analysisQueue = DispatchQueue(label: "earshot.analysis", qos: .userInitiated)
    private let audioArrived: AudioArrivedSignal
    private let notifier = ServiceNotifier()
    private let journal: JournalSink
    private let ring: SampleRingBuffer
    private let server: EventServer
    /// Every output goes through it to the sinks (socket, journal, stdout, history).
    private let router: OutputRouter
    private let historySink: HistorySink?
    /// The MQTT broker (`[mqtt] enabled`), or nil.
    private let mqttSink: MQTTSink?
    /// Prometheus metrics (`[metrics] enabled`), or nil; it gets a `.statistics` output every second.
    private let metricsSink: MetricsSink?
    private var statisticsTimer: DispatchSourceTimer?
    /// HTTP notifications (`[notify] url` set), or nil.
    private let notifySink: NotifySink?
    /// Groups muted at run time (MQTT switches, the socket's `mute`), each until its end on ``muteClock``.
    private let mutes = GroupMutes()
    /// What a mute's duration counts (see ``MuteClock``), fixed at start.
    private let muteClock: MuteClock
    /// The end of the latest analysis window (stream seconds, as `Double` bits), for mutes on the stream's time:
    /// stored on the analysis queue, read by the socket's commands.
    private let streamNow = Atomic<UInt64>(0)
    /// `[detection] alarm_mute_minutes` and `mute_minutes`: replaced on reload (control queue), read by commands.
    private let muteDefaults: Mutex<DaemonConfiguration.Mutes>
    /// The smoke, CO and fire mutes in force, kept in the state directory for the next start (with `[notify]` on:
    /// the phone is told of those mutes), or nil.
    private let muteRecord: MuteRecord?
    /// Those the last run left (in force when it stopped or crashed): told as ended at ``run()``.
    private let mutesLeft: [(group: String, until: Date)]

    /// What a mute's duration counts: the boot clock (`CLOCK_BOOTTIME`: a step of the wall clock does not move a
    /// mute's end, and a suspend counts), or, for input replayed faster or slower than real time (`--input-speed`),
    /// the stream's time, on which that input's events, history and clips are stamped too: a 15-minute mute covers
    /// 15 minutes of the recording, whatever the speed.
    enum MuteClock {
        case boot
        /// Stream time 0 is `origin` (the daemon's start).
        case stream(origin: Date)
    }
    /// How the socket's commands and status replies reach this daemon, and whether it is starting, running or stopping.
    private let link: DaemonLink
    /// Uptime (s) of the last test alert sent (``sendTestAlert(requestedBy:reply:)``).
    private let lastTestAlert = Mutex<Double?>(nil)
    /// The groups the control state lists (the watched ones, and every one that publishes), set at start and reload.
    private let controlGroups = Mutex<(groups: [String], eventGroups: [String])>(([], []))
    /// Whether a sleep session runs (set from the analysis queue as sessions start and stop).
    private let sleepActive = Atomic<Bool>(false)
    /// Audio around each detection (`[clips]`; nil when disabled): cut on the analysis queue, written on the
    /// writer's queue.
    private let clips: ClipRecorder?
    private let clipWriter: ClipWriter?
    /// Sleep sessions and snore reports (`[sleep]`).
    private let sleep: SleepService
    private let pipeline: AnalysisPipeline
    private let supervisor: CaptureSupervisor
    private var signals: SignalSources?
    private var watchdog: ServiceWatchdog?
    /// The daemon's clock: the times of events, the history, clips and sleep sessions; re-anchored on the heartbeat,
    /// where a step of the system clock is found and said (``clockStepped(_:)``). The status reply's uptime counts its
    /// boot clock.
    private let clock: DaemonClock
    private let status = Mutex(StatusSnapshot())
    /// Onsets published (classifier, alarm and snore), for the status reply.
    private let detections = EventCounter()
    /// Monotonic nanoseconds of the analysis queue's last poll, for the watchdog.
    private let heartbeat = Atomic<UInt64>(DispatchTime.now().uptimeNanoseconds)
    /// The heartbeat's last tick for the scheduling check: monotonic ns, and the process's CPU time (ns) then
    /// (``noticeNotScheduled()``, analysis queue).
    private let schedulingTick = Atomic<UInt64>(0)
    private let schedulingCPU = Atomic<UInt64>(0)
    private let deviceHasWorked = Atomic<Bool>(false)
    /// The custom models running (`[models] files`); replaced on reload (control queue).
    private var heads = HeadModelSet()

    struct StatusSnapshot {
        var capture = "opening"
        /// Why capture is unavailable (the error and the retry), while it is; the status reply's `capture_error`.
        var captureError: String?
        var source = ""
        var windows = 0
        var gatedWindows = 0
        var gaps = 0
        var streamTime: Double = 0
        var levelDBFS: Float = ClassificationResult.levelFloorDBFS
        var gateOpen = false
        var topClasses: [Classification] = []
        var processedSeconds: Double = 0
        var lostSeconds: Double = 0
        var activeGroups: [String] = []
        var gateDBFS: Double = 0
        var watch: [String] = []
        /// The custom models running: name and file.
        var models: [(name: String, path: String)] = []
        /// The last reload's failure (its `config_reload_failed` message and when), until a reload succeeds; the
        /// status reply's `reload_error`.
        var reloadError: (message: String, time: Date)?
    }

    /// Loads the configuration and the model, checks the groups, and opens the socket.
    /// - Throws: `EarshotError` `.config` (bad file or class names, a `[history] path` or `[clips] directory` of
    ///   the wrong kind: ``DaemonConfiguration/checkStoragePaths()``), `.noInput` (model files missing), `.system` or
    ///   `.cannotCreate` (the socket cannot be created, another daemon listens on it).
    package init(commandLine: DaemonCommandLine) throws(EarshotError) {
        let clock = DaemonClock()
        self.clock = clock
        let startTime = clock.now()
        self.commandLine = commandLine
        var loaded = try DaemonConfiguration.load(path: commandLine.configPath, overrides: commandLine.overrides)
        try loaded.checkStoragePaths()
        try loaded.readMQTTPassword()
        try loaded.readNotifyURLs()
        configuration = loaded
        mqttSettings = loaded.mqtt
        notifySettings = loaded.notify
        capture = configuration.capture
        output = configuration.output
        muteDefaults = Mutex(loaded.mutes)
        historySettings = configuration.history
        clipSettings = configuration.clips
        BLASThreads.set(1)
        let model = try BuiltInClassifier.shared()
        let heads = try configuration.loadHeadModels().set
        self.heads = heads
        let snoreHead = try configuration.loadSnoreHead()
        let plan = try DetectionPlan(
            configuration: configuration, yamnetLabels: model.classLabels, heads: heads, configPath: commandLine.configPath)
        let journal = configuration.output.journal && !commandLine.foreground
            ? JournalSink() : JournalSink(journalSocketPath: "/nonexistent")
        self.journal = journal
        // See `ringSeconds`. Each write wakes the analysis queue (see AnalysisPipeline).
        let signal = AudioArrivedSignal(queue: analysisQueue)
        audioArrived = signal
        ring = SampleRingBuffer(minimumCapacity: Self.ringSeconds * 48_000, didWrite: { signal.raise() })
        // Before the socket: a metrics address in use stops the start before anything else is created (it answers
        // scrapes once the socket exists, below).
        let metricsSink = try configuration.makeMetricsSink()
        self.metricsSink = metricsSink
        let link = DaemonLink()
        self.link = link
        // The commands are known from the moment the socket exists: one sent while the daemon is still starting
        // waits for it, and is told so if it is not ready in time (not "unknown command").
        let server = try EventServer(
            configuration: EventServer.Configuration(
                path: output.socketPath, mode: output.socketMode, clientQueueLimitBytes: output.clientQueueBytes,
                maxClients: output.maxClients, knownGroups: plan.subscribable, unwatchedGroups: plan.unwatched,
                maxClientsPerUser: output.maxClientsPerUser, stalledClientSeconds: Double(output.stalledClientSeconds),
                controlUsers: output.controlUsers.isEmpty ? [0, geteuid()] : Set(output.controlUsers)),
            status: { link.status() },
            commands: SleepService.commands + ["mute", "unmute", Self.testCommand],
            commandHandler: { command, group, options, reply in link.answer(command, group: group, options: options, reply: reply) })
        self.server = server
        // After the socket: a scrape that answers means the socket can be connected to.
        do {
            try metricsSink?.serve()
        } catch {
            server.stop()
            throw error
        }
        // The sinks in start order; they stop in reverse (the history commits before the socket goes).
        var sinks: [any OutputSink] = [SocketSink(server: server), JournalOutputSink(journal: journal)]
        if commandLine.foreground { sinks.append(StandardOutputSink()) }
        // Input replayed faster or slower than real time is stored on its own time line from the daemon's start, not
        // squeezed against the clock. One mapping for the history, the clips' names and the sleep reports.
        let replayed = configuration.capture.input != nil && commandLine.inputPacing != .realTime
        let timeLine: EventLevelMeter.TimeLine = replayed ? .stream(origin: startTime) : .live
        muteClock = replayed ? .stream(origin: startTime) : .boot
        let historySink = historySettings.enabled
            ? HistorySink(settings: historySettings, timeLine: timeLine)
            : nil
        self.historySink = historySink
        if let historySink { sinks.append(historySink) }
        if let metricsSink { sinks.append(metricsSink) }
        let notifySink = notifySettings.enabled
            ? try NotifySink(
                settings: notifySettings, outboxPath: NotifyOutbox.path(besideHistory: historySettings.path),
                log: { line, priority in journal.log(line, priority: priority) })
            : nil
        self.notifySink = notifySink
        if let notifySink { sinks.append(notifySink) }
        let muteRecord = notifySink == nil ? nil : MuteRecord(
            path: StateDirectory.file(MuteRecord.fileName, besideHistory: historySettings.path),
            log: { line, priority in journal.log(line, priority: priority) })
        self.muteRecord = muteRecord
        mutesLeft = muteRecord?.takeLeft() ?? []
        // Last, so that it stops first: `offline` goes out while the other outputs still run.
        let mqttSink = mqttSettings.enabled
            ? try MQTTSink(
                settings: mqttSettings, notifying: notifySink != nil, commands: { command in link.daemon?.apply(command) },
                log: { line, priority in journal.log(line, priority: priority) })
            : nil
        self.mqttSink = mqttSink
        if let mqttSink { sinks.append(mqttSink) }
        controlGroups.withLock { $0 = (plan.stateGroups, plan.eventGroups) }
        let router = OutputRouter(sinks: sinks)
        self.router = router
        var clips: ClipRecorder?
        if clipSettings.enabled {
            let writer = ClipWriter(
                settings: clipSettings,
                report: { report in
                    switch report {
                    case .failing(let line): router.route(.health(HealthEvent(state: .clipsUnavailable, message: line)))
                    case .recovered(let line): journal.log(line)
                    case .warning(let line): journal.log(line, priority: 4)
                    }
                },
                // Once the outputs have stopped (a clip the disk took late at the stop), the journal still says it.
                saved: { clip in
                    if !router.route(.clip(clip)) { journal.record(fields: clip.journalFields(identifier: journal.identifier)) }
                })
            clipWriter = writer
            // Named by the event's start as the history stores it.
            clips = ClipRecorder(settings: clipSettings, now: { clock.now() }, timeLine: timeLine) { clip in writer.save(clip) }
        } else {
            clipWriter = nil
        }
        self.clips = clips
        let detections = detections
        let mutes = mutes
        let sleep = SleepService(
            analysisQueue: analysisQueue, settings: configuration.sleep,
            publishReport: { object in router.route(.sleepReport(object)) },
            log: { line, priority in journal.log(line, priority: priority) },
            reportHealth: { health in router.route(.health(health)) },
            stateChanged: { active in link.daemon?.sleepStateChanged(active) },
            timeLine: timeLine, audioProblem: Self.audioProblem(capture: "opening", error: nil), clock: { clock.now() })
        self.sleep = sleep
        // As the clips directory is probed: a report directory that cannot be written is said now, not in the
        // morning when the night's report fails.
        if let problem = SleepService.reportDirectoryProblem(configuration.sleep.reportDirectory) {
            router.route(.health(HealthEvent(state: .sleepReportUnavailable, message: SleepService.reportDirectoryLine(problem))))
        }
        let stage: DetectionStage
        do {
            stage = try DetectionStage(settings: plan.stageSettings, engine: plan.engine, heads: heads, snoreHead: snoreHead)
        } catch {
            server.stop()
            throw error
        }
        pipeline = AnalysisPipeline(
            queue: analysisQueue, ring: ring, stage: stage, router: router, sleep: sleep, clips: clips,
            detections: detections, mutes: mutes, snoringWatched: plan.snoringWatched, clock: clock,
            onFirstAudio: { link.daemon?.audioStarted() },
            onWindow: replayed ? { end in link.daemon?.streamReached(end) } : nil)
        supervisor = CaptureSupervisor(
            ring: ring, stallSeconds: Self.inputStallSeconds, callbackQueue: control,
            open: {
                guard let daemon = link.daemon else { throw EarshotError(.unavailable, "the daemon is stopping") }
                return try daemon.openSource()
            },
            onStateChange: { state in link.daemon?.captureStateChanged(state) })
        link.daemon = self
        link.phase.store(.running, ordering: .releasing)
        noteSettings(configuration)
        noteModels(heads)
        for line in heads.notes(windowDuration: configuration.analysis.windowDuration) { journal.log(line) }
        for line in configuration.warnings() { journal.log("warning: \(line)", priority: 4) }
        if let path = configuration.sleep.modelPath {
            journal.log("the snore detector adds the snoring probability of \(path) to its evidence")
        }
        if clipSettings.enabled, let clipWriter {
            let groups = clipSettings.groups.isEmpty ? "every group" : clipSettings.groups.joined(separator: ", ")
            // The writer's start-up probe (can the directory be made and written?) has run: a failing one has sent
            // clips_unavailable, and this line must not then claim that clips are being saved.
            clipWriter.flush()
            if clipWriter.statistics.failing {
                journal.log("not saving clips of \(groups) for now: \(clipSettings.directory) cannot be written (see clips_unavailable); each clip is tried again when it is due")
            } else {
                journal.log("saving clips of \(groups) to \(clipSettings.directory): \(SettingRules.format(clipSettings.preSeconds)) s before each event to \(SettingRules.format(clipSettings.postSeconds)) s after its end, keeping at most \(clipSettings.maxClips) for \(clipSettings.retentionDays) days")
            }
        }
    }

    /// Whether the analysis queue's last heartbeat (`beat`, uptime in ns) is under 5 s before `now`: what the
    /// systemd watchdog's keep-alive asks. A heartbeat stored after `now` was read counts as recent (the queue
    /// stores it concurrently; subtracting would underflow and trap).
    package static func heartbeatIsRecent(_ beat: UInt64, now: UInt64) -> Bool {
        now <= beat || now - beat < 5_000_000_000
    }

    /// Starts capture, analysis, signal handling and the watchdog, then runs the main dispatch loop forever. A
    /// SIGTERM or SIGINT that comes during the start stops the daemon once the start is done (``starting``); a
    /// SIGHUP reloads it then.
    package func run() -> Never {
        starting.enter()
        signals = SignalHandling.install(
            queue: signalQueue,
            onTerminate: { [unowned self] signal in stopQueue.async { self.shutdown(reason: "signal \(signal)", status: 0) } },
            onReload: { [unowned self] in starting.notify(queue: control) { self.reload() } })
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
                        // The analysis queue stores the heartbeat concurrently: read it before the clock, and never
                        // subtract a later reading from an earlier one (a UInt64 underflow traps).
                        let beat = heartbeat.load(ordering: .relaxed)
                        return Self.heartbeatIsRecent(beat, now: DispatchTime.now().uptimeNanoseconds)
                    },
                    onError: { [journal] error in journal.log("watchdog: \(error.message)") })
            } catch {
                journal.log("watchdog disabled: \(error.message)")
            }
        }
        router.start()
        routeControls()
        tellMutesLeft()
        analysisQueue.async { [self] in pipeline.start(audioArrived: audioArrived) }
        // A session the previous daemon was running when it stopped goes on first (the schedule then finds it).
        analysisQueue.async { [sleep] in sleep.resumeInterruptedSession() }
        sleep.startSchedule()
        let heartbeatTimer = DispatchSource.makeTimerSource(queue: analysisQueue)
        heartbeatTimer.schedule(deadline: .now(), repeating: Self.heartbeatSeconds)
        schedulingTick.store(ProducerLoop.monotonicNanoseconds(), ordering: .relaxed)
        schedulingCPU.store(Self.processCPUNanoseconds(), ordering: .relaxed)
        heartbeatTimer.setEventHandler { [unowned self] in
            heartbeat.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
            noticeClockStep()
            noticeNotScheduled()
            if case .boot = muteClock { endMutes(at: clock.uptimeSeconds) }
            pipeline.flushGapReport()
            updateStatus()
        }
        heartbeatTimer.resume()
        startStatistics()
        supervisor.start()
        _ = try? notifier.status("opening \(sourceDescription)")
        starting.leave()
        withExtendedLifetime(heartbeatTimer) { dispatchMain() }
    }

    /// The heartbeat's period (s); a tick that comes ``notScheduledSeconds`` or more after the one before
    /// (CLOCK_MONOTONIC, which counts a stopped process's time, not a suspended machine's) while the process used
    /// less than ``notScheduledCPUShare`` of that time on the CPU finds a process that was not scheduled (an analysis
    /// queue late because it was busy used the CPU meanwhile).
    static let heartbeatSeconds = 1.0
    static let notScheduledSeconds = 5.0
    static let notScheduledCPUShare = 0.25

    /// Notices, on the heartbeat (analysis queue, no timer of its own), when earshotd itself was not scheduled
    /// (SIGSTOP, CPU starvation): `overrun` `earshotd was not scheduled for 48 s (CPU starvation or a stopped
    /// process); audio of that time may be lost`, with `"cause":"not_scheduled"` and `"seconds"`, rather than
    /// blaming the device (trial 11 #3). The analysis is told, so that the gap that follows is worded as this
    /// freeze's.
    private func noticeNotScheduled() {
        let now = ProducerLoop.monotonicNanoseconds(), cpu = Self.processCPUNanoseconds()
        let between = Double(now &- schedulingTick.exchange(now, ordering: .relaxed)) / 1e9
        let used = Double(cpu &- schedulingCPU.exchange(cpu, ordering: .relaxed)) / 1e9
        guard between >= Self.notScheduledSeconds, used < Self.notScheduledCPUShare * between else { return }
        // The tick itself was due a tick after the previous one.
        let frozen = between - Self.heartbeatSeconds
        router.route(.health(HealthEvent(
            state: .overrun, message: Self.notScheduledMessage(seconds: frozen),
            details: ["cause": .string("not_scheduled"), "seconds": .number(frozen, decimals: 1)])))
        pipeline.notScheduled()
    }

    /// The system clock stepped (heartbeat, analysis queue: no event is mapped meanwhile). What was stamped on the
    /// old clock moves by the step, in order with the events: clips' names from now on (the recorder's time line)
    /// and the mtimes of this run's clips (the writer; retention goes by them), a running sleep session's start, and,
    /// through the `clock_changed` health event routed after every event stamped before it, the history's rows and
    /// time line. The phone is not told (not a `[notify] health` state): nothing stopped working.
    private func noticeClockStep() {
        if let step = clock.checkForStep() { clockStepped(step) }
    }

    private func clockStepped(_ step: DaemonClock.Step) {
        clips?.clockStepped(by: step.seconds)
        clipWriter?.clockStepped(by: step.seconds)
        sleep.clockStepped(by: step.seconds)
        router.route(.health(.clockChanged(seconds: step.seconds, before: step.before, after: step.after)), at: step.after)
    }

    /// The CPU time this process has used (`CLOCK_PROCESS_CPUTIME_ID`), in nanoseconds.
    private static func processCPUNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// `earshotd was not scheduled for 48 s (CPU starvation or a stopped process); audio of that time may be lost`.
    static func notScheduledMessage(seconds: Double) -> String {
        "earshotd was not scheduled for \(Int(seconds.rounded())) s (CPU starvation or a stopped process); audio of that time may be lost"
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

    fileprivate func openSource() throws -> any CaptureSource {
        if usingFallback.load(ordering: .relaxed), let fallback = commandLine.fallbackInput {
            return try RealtimeFileSource(path: fallback)
        }
        switch capture.input {
        case .file(let path):
            return try RealtimeFileSource(path: path, pacing: commandLine.inputPacing)
        case .standardInput:
            return try RealtimeFileSource(
                path: RealtimeFileSource.standardInputName, rawSampleRate: capture.inputSampleRate,
                pacing: commandLine.inputPacing)
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

    fileprivate func captureStateChanged(_ state: CaptureSupervisor.State) {
        noteCaptureState(state)
        // The sleep service is handed the capture's state as a value (for its start and status replies).
        let (capture, error) = status.withLock { ($0.capture, $0.captureError) }
        sleep.captureChanged(audioProblem: Self.audioProblem(capture: capture, error: error))
    }

    private func noteCaptureState(_ state: CaptureSupervisor.State) {
        switch state {
        case .opening, .stopped:
            break
        case .running(let name, let format):
            if capture.input == nil, !usingFallback.load(ordering: .relaxed) { deviceHasWorked.store(true, ordering: .relaxed) }
            status.withLock { $0.capture = "live"; $0.captureError = nil; $0.source = "\(name) (\(format))" }
            if let stalledAt {
                // The end of a stall: the same source, delivering again.
                self.stalledAt = nil
                let seconds = Double(DispatchTime.now().uptimeNanoseconds &- stalledAt) / 1e9 + Self.inputStallSeconds
                router.route(.health(HealthEvent(
                    state: .captureLive,
                    message: "audio from \(Self.sourceLabel(name)) again after about \(Int(seconds.rounded())) s without any",
                    details: ["source": .string(name)])))
                _ = try? notifier.status("listening to \(sourceDescription)")
                break
            }
            let live = HealthEvent(state: .captureLive, message: "capturing from \(name): \(format)",
                                   details: ["source": .string(name)])
            let held = name == RealtimeFileSource.standardInputName && firstAudio.withLock { state -> Bool in
                guard !state.flowed else { return false }
                state.heldLive = live
                return true
            }
            if held {
                status.withLock { $0.capture = "waiting"; $0.captureError = Self.waitingMessage }
            } else {
                router.route(.health(live))
            }
        case .stalled(let name, let seconds):
            stalledAt = DispatchTime.now().uptimeNanoseconds
            let line = Self.stallMessage(source: name, seconds: seconds)
            status.withLock { $0.capture = "stalled"; $0.captureError = line }
            router.route(.health(HealthEvent(state: .inputStalled, message: line, details: ["source": .string(name)])))
            analysisQueue.async { [self] in pipeline.captureStalled() }
            _ = try? notifier.status("waiting for \(sourceDescription): no audio for \(SettingRules.format(seconds)) s")
        case .unavailable(let error) where capture.input != nil || usingFallback.load(ordering: .relaxed):
            // A file or stdin that cannot be opened or read will not get better by retrying (and a retry would
            // replay a file from its start): analyse what arrived, then say why in the last line (priority 3, err,
            // in the journal; instead of `stopped (...)`, so that the cause is the one line) and exit with the
            // error's status.
            analysisQueue.sync { pipeline.finishInput() }
            shutdown(reason: "input failed", status: error.exitStatus, lastLine: (error.message, 3))
        case .unavailable(let error):
            let retry = supervisor.nextRetryDelay.map { " (\(supervisor.backoff.retryText(delay: $0)))" } ?? ""
            let alreadySaid = status.withLock { status -> Bool in
                defer { status.capture = "unavailable"; status.captureError = error.message + retry }
                return status.capture == "unavailable"
            }
            if alreadySaid {
                // One health event per outage: a retry that fails another way (the device vanished mid-capture,
                // then cannot be opened) is only a journal line.
                journal.log("capture still unavailable: \(error.message)\(retry)", priority: 4)
            } else {
                router.route(.health(HealthEvent(state: .captureUnavailable, message: error.message + retry)))
                // Open events end now (stream_gap, at their last positive window), not when the device returns.
                analysisQueue.async { [self] in pipeline.captureLost() }
            }
            // Serving already (socket, outputs, capture_unavailable published): READY=1 now, so that a unit with
            // Type=notify waits for the device instead of killing the daemon at its start timeout (trial 6 #3).
            let waiting = "waiting for \(sourceDescription): \(error.message)"
            do {
                if readySent.exchange(true, ordering: .relaxed) {
                    try notifier.status(waiting)
                } else {
                    try notifier.ready(status: waiting)
                }
            } catch {
                journal.log("sd_notify: \(error.message)")
            }
        case .finished:
            analysisQueue.sync { pipeline.finishInput() }
            // A file cut short is analysed as far as it goes, as `earshot analyze` does, and named once, after the
            // events of the audio it held.
            shutdown(reason: "end of input", status: 0, warnings: supervisor.endNote.map { [$0] } ?? [])
        }
    }

    /// `standard input` for `-`, else the quoted name.
    static func sourceLabel(_ name: String) -> String {
        name == RealtimeFileSource.standardInputName ? "standard input" : "\"\(name)\""
    }

    /// The `input_stalled` message: `no audio from standard input for 5 s (has the program writing to it hung or
    /// paused?); waiting for it, and saying so when audio comes back`.
    static func stallMessage(source name: String, seconds: Double) -> String {
        let cause = name == RealtimeFileSource.standardInputName
            ? "has the program writing to it hung or paused?" : "has the device stopped delivering?"
        return "no audio from \(sourceLabel(name)) for \(SettingRules.format(seconds)) s (\(cause)); waiting for it, and saying so when audio comes back"
    }

    /// Why a standard input opened before its writer wrote is `waiting`: `earshot status` and a sleep session's
    /// start and status say it.
    static let waitingMessage = "nothing from standard input yet (is the program writing to it running?)"

    /// The first audio from the ring (analysis queue): a standard input that was `waiting` is live now, and says so
    /// (its `capture_live`, held since it opened); READY=1.
    fileprivate func audioStarted() {
        let heldLive = firstAudio.withLock { state -> HealthEvent? in
            state.flowed = true
            defer { state.heldLive = nil }
            return state.heldLive
        }
        if let heldLive {
            status.withLock { if $0.capture == "waiting" { $0.capture = "live"; $0.captureError = nil } }
            sleep.captureChanged(audioProblem: nil)
            router.route(.health(heldLive))
        }
        do {
            // READY=1 again when the device was waited for: systemd ignores a second one; the status is what counts.
            readySent.store(true, ordering: .relaxed)
            try notifier.ready(status: "listening to \(sourceDescription)")
        } catch {
            journal.log("sd_notify: \(error.message)")
        }
    }

    // MARK: Status

    private func updateStatus() {
        let counters = pipeline.stage.counters
        let active = pipeline.activeGroups
        status.withLock {
            $0.windows = counters.windows
            $0.gatedWindows = counters.gatedWindows
            $0.gaps = counters.gaps
            $0.streamTime = counters.streamTime
            $0.levelDBFS = counters.lastLevelDBFS
            $0.gateOpen = counters.lastGateOpen
            $0.topClasses = counters.lastTopClasses
            $0.processedSeconds = counters.processedSeconds
            $0.lostSeconds = counters.lostSeconds
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

    fileprivate func statusObject() -> JSONObject {
        let snapshot = status.withLock { $0 }
        // While no audio arrives (capture opening, waiting, unavailable, stalled) there is no level to report: the
        // last one (-120 dBFS before any window) would read as a silent room; null, as the text form's "no audio",
        // and no classes.
        let hearing = snapshot.capture == "live"
        var object: JSONObject = [
            "type": "status",
            "uptime": .number(clock.uptimeSeconds, decimals: 1),
            "capture": .string(snapshot.capture),
            "source": .string(snapshot.source),
            "xruns": .int(supervisor.xrunCount),
            "frames_captured": .int(Int(supervisor.framesCaptured)),
            "gaps": .int(snapshot.gaps),
            "lost_seconds": .number(snapshot.lostSeconds, decimals: 1),
            "windows": .int(snapshot.windows),
            "gated_windows": .int(snapshot.gatedWindows),
            "stream_time": .number(snapshot.streamTime, decimals: 3),
            "level_dbfs": hearing ? .number(Double(snapshot.levelDBFS), decimals: 1) : .null,
            "gate_open": hearing ? .bool(snapshot.gateOpen) : .null,
            "classes": EventLines.classesArray(hearing ? snapshot.topClasses : []),
            "gate_dbfs": .number(snapshot.gateDBFS, decimals: 1),
            "watch": .array(snapshot.watch.map { .string($0) }),
            "active": .array(snapshot.activeGroups.map { .string($0) }),
            "detections": .int(detections.value),
            "models": .array(snapshot.models.map { .object(["name": .string($0.name), "path": .string($0.path)]) }),
            "muted": .array(mutes.muted.sorted().map { .string($0) }),
            "muted_until": mutedUntil,
        ]
        if let captureError = snapshot.captureError { object["capture_error"] = .string(captureError) }
        if let reloadError = snapshot.reloadError {
            object["reload_error"] = .object([
                "message": .string(reloadError.message), "time": .string(EventJSON.timestamp(reloadError.time)),
            ])
        }
        object.merge(mqttStatus)
        object.merge(notifyStatus)
        return object
    }

    /// `"mqtt":{"broker":"host:port","node":"kitchen","connected":true,"waiting":0,"dropped":0,"published":N}` with
    /// `[mqtt]` on.
    private var mqttStatus: JSONObject {
        guard let sink = mqttSink else { return [:] }
        let client = sink.client
        let backlog = client.backlog
        return ["mqtt": .object([
            "broker": .string(client.endpoint.description), "node": .string(sink.settings.node), "connected": .bool(client.isConnected),
            "waiting": .int(backlog.waiting), "dropped": .int(backlog.dropped), "published": .int(client.publishedCount),
        ])]
    }

    /// `"notify":{"sent":N,"failed":N,"dropped":N,"suppressed":N,"reminders":N,"retrying":N,"failing":[URL,...],
    /// "urls":[URL,...]}` with `[notify] url` set; `retrying`: notifications waiting for their next attempt after one
    /// failed (per URL); `failing`: the URLs whose notifications are failing now (`notify_failed` said, none through
    /// since); `urls`: every URL notified now, in `[notify] url`'s order (after a reload, the new ones: trial 17 M1).
    /// URLs as health events show them (`NotifySettings.shownURL(_:index:count:)`).
    private var notifyStatus: JSONObject {
        guard let notifySink else { return [:] }
        let statistics = notifySink.statistics
        return ["notify": .object([
            "sent": .int(statistics.sent), "failed": .int(statistics.failed), "dropped": .int(statistics.dropped),
            "suppressed": .int(statistics.suppressed), "reminders": .int(statistics.reminders),
            "retrying": .int(statistics.retrying), "failing": .array(notifySink.failingURLs.map { .string($0) }),
            "urls": .array(notifySink.testAlertDestinations.map { .string($0.target) }),
        ])]
    }

    /// Why the MQTT broker was not reached by a test alert's deadline: `the broker HOST:PORT is disconnected: the
    /// alert waits in the outbox (N messages waiting) and goes out when it connects`, or, connected, `the broker
    /// HOST:PORT has not acknowledged it within 10 s: it waits in the outbox (N messages waiting)`.
    private var mqttNotReached: String {
        guard let client = mqttSink?.client else { return "MQTT is off" }
        let broker = client.endpoint.description
        let waiting = client.backlog.waiting
        let count = "\(waiting) message\(waiting == 1 ? "" : "s") waiting"
        if !client.isConnected {
            return "the broker \(broker) is disconnected: the alert waits in the outbox (\(count)) and goes out when it connects"
        }
        return "the broker \(broker) has not acknowledged it within \(Int(TestAlertReceipt.deadlineSeconds)) s: it waits in the outbox (\(count))"
    }

    /// With `[metrics]` on: routes the counters no output carries (``RuntimeStatistics``) every second, from the
    /// control queue (the socket's counters are read on its queue, never the analysis queue's).
    private func startStatistics() {
        guard metricsSink != nil else { return }
        let timer = DispatchSource.makeTimerSource(queue: control)
        timer.schedule(deadline: .now(), repeating: .seconds(1), leeway: .milliseconds(100))
        timer.setEventHandler { [unowned self] in router.route(.statistics(runtimeStatistics())) }
        statisticsTimer = timer
        timer.resume()
    }

    private func runtimeStatistics() -> RuntimeStatistics {
        let snapshot = status.withLock { $0 }
        let socket = server.statistics
        var statistics = RuntimeStatistics()
        statistics.audioProcessedSeconds = snapshot.processedSeconds
        statistics.audioLostSeconds = snapshot.lostSeconds
        statistics.captureXruns = supervisor.xrunCount
        statistics.socketClients = socket.subscribers
        statistics.socketDroppedLines = socket.droppedLines
        statistics.historyWriteErrors = historySink?.recorder.writer.writeErrors ?? 0
        statistics.captureLive = snapshot.capture == "live"
        if let notify = notifySink?.statistics {
            statistics.notify = RuntimeStatistics.NotifyFigures(sent: notify.sent, failed: notify.failed, dropped: notify.dropped)
        }
        if let client = mqttSink?.client {
            let backlog = client.backlog
            statistics.mqtt = RuntimeStatistics.MQTTFigures(
                connected: client.isConnected, published: client.publishedCount, dropped: backlog.dropped,
                waiting: backlog.waiting)
        }
        return statistics
    }

    /// Copies the running custom models' names and files for the status reply.
    private func noteModels(_ set: HeadModelSet) {
        let models = set.models.map { (name: $0.name, path: $0.path) }
        status.withLock { $0.models = models }
    }

    // MARK: Controls

    /// Routes the control state as it is now (start, reload, a mute, a sleep session starting or stopping).
    private func routeControls() {
        let (groups, eventGroups) = controlGroups.withLock { $0 }
        router.route(.controls(ControlState(
            groups: groups, eventGroups: eventGroups, muted: mutes.muted, sleepActive: sleepActive.load(ordering: .relaxed))))
    }

    /// Why no audio is arriving, for a sleep session's start and status: `no audio is arriving (capture
    /// unavailable: ERROR)`, or `no audio has arrived yet (capture opening)`; nil while capture is live.
    static func audioProblem(capture: String, error: String?) -> String? {
        switch capture {
        case "live": return nil
        case "opening": return "no audio has arrived yet (capture opening)"
        default: return "no audio is arriving (capture \(capture)\(error.map { ": \($0)" } ?? ""))"
        }
    }

    fileprivate func sleepStateChanged(_ active: Bool) {
        sleepActive.store(active, ordering: .relaxed)
        routeControls()
    }

    /// Answers a socket command registered in `init` (`sleep_start`, `sleep_stop`, `sleep_status`, `mute`, `unmute`,
    /// `test`) once the daemon runs; ``DaemonLink/answer(_:group:reply:)`` answers for it while it starts or stops.
    /// Every reply but two is given before returning: a test alert's when the network outputs have their results
    /// (``sendTestAlert(requestedBy:reply:)``), `sleep_stop`'s once the report's files are written
    /// (``SleepService/handle(command:reply:)``, on the report queue).
    fileprivate func answer(_ command: String, group: String?, options: JSONObject, reply: @escaping EventServer.CommandReply) {
        switch command {
        case "mute", "unmute": reply(setMute(group, muted: command == "mute", options: options))
        case Self.testCommand: sendTestAlert(requestedBy: "the event socket", reply: reply)
        // `sleep_stop` replies once its report is written (the socket's queue does not wait for the disk).
        default: handleSleep(command, reply: reply)
        }
    }

    /// A sleep command (any queue but the analysis queue): a step of the clock the heartbeat has not seen yet (it
    /// looks once a second) is taken first, so that a session starts and stops on the clock as it is now.
    /// The socket's: `sleep_stop` replies once its report is written, off the socket's queue.
    private func handleSleep(_ command: String, reply: @escaping EventServer.CommandReply) {
        analysisQueue.sync { noticeClockStep() }
        sleep.handle(command: command, reply: reply)
    }

    /// MQTT's (control queue): the reply once the command is done, report written.
    private func handleSleep(_ command: String) -> JSONObject {
        analysisQueue.sync { noticeClockStep() }
        return sleep.handle(command: command)
    }

    /// `{"cmd":"mute"|"unmute","group":NAME}` from the socket (server queue; the event server has checked that the
    /// peer is a control user), `mute` with `"minutes":N` (1 to 1440; without it ``DaemonConfiguration/Mutes``'s
    /// default for the group). Mutes are a lock of their own: nothing here waits for the control queue.
    /// - Returns: `{"type":"mute","group":NAME,"muted":true,"changed":true,"minutes":15,"until":"...Z"}`
    ///   (`changed` false for a renewal: the group was muted already, its end moves), `{"type":"mute","group":NAME,
    ///   "muted":false,"changed":true}`, or an error reply for a missing or unknown group, a bad `minutes` or
    ///   another field.
    fileprivate func setMute(_ group: String?, muted: Bool, options: JSONObject = [:]) -> JSONObject {
        let command = muted ? "mute" : "unmute"
        let groups = controlGroups.withLock { $0.groups }
        func error(_ message: String) -> JSONObject { ["type": "error", "message": .string(message)] }
        guard let group else {
            return error("\(command) needs a group: {\"cmd\":\"\(command)\",\"group\":\"\(groups.first ?? "baby_cry")\"}")
        }
        guard groups.contains(group) else {
            return error("\(command): \"\(DisplayText.escaped(group, limit: 80))\" is not a watched group (watched: \(groups.joined(separator: ", ")))")
        }
        let allowed = muted ? ["minutes"] : []
        if let other = options.entries.first(where: { !allowed.contains($0.key) }) {
            let takes = muted ? "\"group\" and \"minutes\"" : "only \"group\""
            return error("\(command): unknown field \"\(DisplayText.escaped(other.key, limit: 40))\" (it takes \(takes))")
        }
        guard muted else {
            let changed = unmuteGroup(group, by: Self.bySocket)
            return ["type": "mute", "group": .string(group), "muted": false, "changed": .bool(changed)]
        }
        var minutes = muteDefaults.withLock { $0.defaultMinutes(of: group) }
        if let value = options["minutes"] {
            guard let given = value.intValue, SettingRules.muteMinutes.isValid(given) else {
                return error("mute: \"minutes\" must be a whole number from 1 to \(GroupMutes.maximumMinutes) (got \(DisplayText.escaped(value.encoded, limit: 40)))")
            }
            minutes = given
        }
        let (changed, until) = muteGroup(group, minutes: minutes, by: Self.bySocket)
        return [
            "type": "mute", "group": .string(group), "muted": true, "changed": .bool(changed), "minutes": .int(minutes),
            "until": .string(EventJSON.timestamp(until)),
        ]
    }

    /// Who muted or unmuted a group, as the journal and the notification say it.
    static let bySocket = "over the event socket"
    static let byMQTT = "by an MQTT command"

    /// The mute clock's reading now (s): the boot clock since the start, or the latest window's end.
    private func muteNow() -> Double {
        switch muteClock {
        case .boot: clock.uptimeSeconds
        case .stream: Double(bitPattern: streamNow.load(ordering: .relaxed))
        }
    }

    /// The wall-clock time of a mute's `end` (mute-clock seconds), the clock reading `now`.
    private func wallTime(ofMuteEnd end: Double, now: Double) -> Date {
        switch muteClock {
        case .boot: clock.now().addingTimeInterval(end - now)
        case .stream(let origin): origin.addingTimeInterval(end)
        }
    }

    /// The status reply's `"muted_until"`: each muted group's end as a UTC timestamp, `{"smoke_alarm":"...Z"}`.
    private var mutedUntil: JSONValue {
        let now = muteNow()
        return .object(JSONObject(uniqueEntries: mutes.mutes.sorted { $0.key < $1.key }.map {
            ($0.key, .string(EventJSON.timestamp(wallTime(ofMuteEnd: $0.value.end, now: now))))
        }))
    }

    /// Mutes `group` for `minutes` (or renews its mute, moving the end): the journal line, the control state (the
    /// MQTT switch `OFF`) and the mute output (a life-safety group's notification). Any queue.
    /// - Returns: whether it was not muted before, and when the mute ends (wall clock).
    @discardableResult
    private func muteGroup(_ group: String, minutes: Int, by: String) -> (changed: Bool, until: Date) {
        let now = muteNow()
        let end = now + Double(minutes) * 60
        let changed = mutes.mute(group, until: end, minutes: minutes)
        let until = wallTime(ofMuteEnd: end, now: now)
        if GroupMutes.lifeSafetyGroups.contains(group) { muteRecord?.muted(group, until: until) }
        journal.log(Self.mutedLine(group: group, renewed: !changed, by: by, minutes: minutes, until: until, now: clock.now()))
        routeControls()
        router.route(.mute(MuteChange(group: group, kind: .muted(minutes: minutes, until: until), requestedBy: by)))
        return (changed, until)
    }

    /// `smoke_alarm muted over the event socket for 15 min, until 19:15: its events are not published until then`
    /// (`muted again` for a renewal; `19:15 tomorrow` past midnight).
    package static func mutedLine(group: String, renewed: Bool, by: String, minutes: Int, until: Date, now: Date) -> String {
        "\(group) muted \(renewed ? "again " : "")\(by) for \(MuteText.duration(minutes: minutes)), until \(MuteText.clock(until, now: now)): its events are not published until then"
    }

    /// Unmutes `group` when it is muted: the journal line, the control state, the mute output, and an event of
    /// it still open is announced. Any queue. Returns whether it was muted.
    private func unmuteGroup(_ group: String, by: String) -> Bool {
        guard mutes.unmute(group) else { return false }
        muteRecord?.unmuted(group)
        journal.log("\(group) unmuted \(by)")
        routeControls()
        router.route(.mute(MuteChange(group: group, kind: .unmuted, requestedBy: by)))
        announceOpenEvent(of: group)
        return true
    }

    /// The mutes whose end is at or before `now` (mute-clock seconds) end, as an `unmute` would, with one journal
    /// line each: `smoke_alarm unmuted: its 15 min mute ended` (analysis queue: the heartbeat, or a window on the
    /// stream's time, so that an event still open is announced in order with the stage's outputs).
    private func endMutes(at now: Double) {
        for (group, mute) in mutes.expire(at: now) {
            muteRecord?.unmuted(group)
            journal.log("\(group) unmuted: its \(MuteText.duration(minutes: mute.minutes)) mute ended")
            routeControls()
            router.route(.mute(MuteChange(group: group, kind: .ended(minutes: mute.minutes))))
            pipeline.announceHeldOnset(of: group)
        }
    }

    /// The smoke, CO and fire mutes the last run left in force (it stopped, crashed or lost power before they ended):
    /// ended by this start, so the phone, last told `No smoke alarm alerts until 20:59`, is told that the group
    /// listens again (trial 16 L2), once; a group no longer watched gets only the journal line.
    private func tellMutesLeft() {
        let watched = controlGroups.withLock { $0.groups }
        let now = clock.now()
        for (group, until) in mutesLeft {
            let end = until > now ? "until \(MuteText.clock(until, now: now)), and this start ended it" : "until \(MuteText.clock(until)), which passed while earshotd was stopped"
            guard watched.contains(group) else {
                journal.log("\(group) was muted when earshotd last stopped (\(end)); it is no longer watched")
                continue
            }
            journal.log("\(group) was muted when earshotd last stopped (\(end)): its events are published")
            router.route(.mute(MuteChange(group: group, kind: .endedByRestart(until: until))), at: now)
        }
    }

    /// The analysis reached stream time `end` (s, a window's end; analysis queue): with mutes on the stream's time,
    /// those due end.
    fileprivate func streamReached(_ end: Double) {
        streamNow.store(end.bitPattern, ordering: .relaxed)
        endMutes(at: end)
    }

    /// `group` has just been unmuted: an event of it still open, whose onset was held back while it was muted, is
    /// announced now, on the analysis queue (in order with the stage's own outputs, so its end cannot overtake it).
    private func announceOpenEvent(of group: String) {
        pipeline.queue.async { [self] in pipeline.announceHeldOnset(of: group) }
    }

    /// The socket command that sends a test alert: `{"cmd":"test"}`.
    static let testCommand = "test"
    /// Seconds between two test alerts at least: a button pressed twice, or held by a script, sends one.
    static let testAlertIntervalSeconds = 10.0

    /// Routes a test alert (``DaemonOutput/testAlert(_:)``) unless one went out less than
    /// ``testAlertIntervalSeconds`` ago, and replies once the outputs that reach over the network have their result
    /// for it (each `[notify]` URL's first attempt, the MQTT broker's acknowledgement), or
    /// ``TestAlertReceipt/deadlineSeconds`` after it went out. Any thread; returns at once (`reply` runs later, on
    /// the thread of the last result or of the deadline). `requestedBy` is said in the journal line.
    ///
    /// The reply: `{"type":"test_alert_sent","time":...,"node":...,"outputs":["socket","journal",...],"message":...,
    /// "results":[...]}`: the outputs it was handed to; `message`, the notification's words, with `[notify] url`
    /// set; `results`, one object per network destination, in order (``testAlertResult(_:)``); `not_reached`,
    /// output name to why, for the MQTT broker not acknowledging it by the deadline and for `[notify]` URLs whose
    /// first attempt failed or had no answer by then (`URL: HTTP 500 (retrying: 3 more attempts)`, joined with `; `);
    /// `notify_failing`, the `[notify]` URLs that were failing before it. Or an error reply at once: `test alert
    /// refused: one was sent 3 s ago; at most one per 10 s (try again in 7 s)`.
    fileprivate func sendTestAlert(requestedBy: String, reply: @escaping EventServer.CommandReply) {
        let now = Double(DispatchTime.now().uptimeNanoseconds) / 1e9
        let interval = Self.testAlertIntervalSeconds
        let since = lastTestAlert.withLock { last -> Double? in
            if let last, now - last < interval { return now - last }
            last = now
            return nil
        }
        if let since {
            let wait = max(1, Int((interval - since).rounded(.up)))
            return reply(["type": "error", "message": .string("test alert refused: one was sent \(Int(since.rounded(.down))) s ago; at most one per \(Int(interval)) s (try again in \(wait) s)")])
        }
        let time = Date()
        let outputs = router.sinkNames(accepting: .testAlert(TestAlert(requestedBy: requestedBy)))
        var sent: JSONObject = [
            "type": "test_alert_sent", "time": .string(EventJSON.timestamp(time)), "node": .string(mqttSettings.node),
            "outputs": .array(outputs.map { .string($0) }),
        ]
        if let notifySink { sent["message"] = .string(NotificationMessage.testAlertText(node: notifySink.settings.node)) }
        // Failing until now: this alert is tried all the same, and may be the one that gets through.
        if let failing = notifySink?.failingURLs, !failing.isEmpty {
            sent["notify_failing"] = .array(failing.map { .string($0) })
        }
        var destinations: [TestAlertReceipt.Destination] = []
        if let notifySink, outputs.contains(notifySink.name) { destinations += notifySink.testAlertDestinations }
        if let mqttSink, outputs.contains(mqttSink.name) { destinations.append(mqttSink.testAlertDestination) }
        let receipt = TestAlertReceipt(destinations: destinations) { [weak self, sent] entries in
            var result = sent
            if let self {
                result["results"] = .array(entries.map { .object(testAlertResult($0)) })
                let notReached = testAlertNotReached(entries)
                if !notReached.entries.isEmpty { result["not_reached"] = .object(notReached) }
            }
            reply(result)
        }
        router.route(.testAlert(TestAlert(requestedBy: requestedBy, receipt: receipt)), at: time)
        receipt.start()
    }

    /// One network destination's result in a test alert's reply: `{"output":"notify","target":URL,...}` or
    /// `{"output":"mqtt","target":"host:port",...}` with `"result"`:
    /// - `delivered`: the URL accepted the first attempt (`"http_status":200`), in `"seconds"` from the alert;
    /// - `failed`: the first attempt failed (`"problem"`: `HTTP 500` or libcurl's words, `"http_status"` with an
    ///   answer, `"retries_left"`: the attempts still to come);
    /// - `acknowledged`: the broker acknowledged it (PUBACK), in `"seconds"`;
    /// - `not_sent`: it never went out (`"problem"`: the URL's queue full, the daemon stopping);
    /// - `no_answer` (a URL) and `not_acknowledged` (the broker, with `"connected"` and `"waiting"`, the messages
    ///   in its outbox, as the deadline passes): nothing by the deadline (`"seconds"`).
    private func testAlertResult(_ entry: TestAlertReceipt.Entry) -> JSONObject {
        var object: JSONObject = ["output": .string(entry.destination.output), "target": .string(entry.destination.target)]
        switch entry.outcome {
        case .delivered(let status)?:
            object["result"] = "delivered"
            object["http_status"] = .int(status)
        case .failed(let problem, let status, let retriesLeft)?:
            object["result"] = "failed"
            object["problem"] = .string(problem)
            if let status { object["http_status"] = .int(status) }
            object["retries_left"] = .int(retriesLeft)
        case .acknowledged?:
            object["result"] = "acknowledged"
        case .notSent(let problem)?:
            object["result"] = "not_sent"
            object["problem"] = .string(problem)
        case nil:
            if let client = mqttSink?.client, entry.destination.output == "mqtt" {
                object["result"] = "not_acknowledged"
                object["connected"] = .bool(client.isConnected)
                object["waiting"] = .int(client.backlog.waiting)
            } else {
                object["result"] = "no_answer"
            }
        }
        object["seconds"] = .number(entry.seconds, decimals: 2)
        return object
    }

    /// The `not_reached` of a test alert's reply: `"mqtt"` (``mqttNotReached``) unless the broker acknowledged it,
    /// and `"notify"` naming each URL that did not accept the first attempt: `URL: HTTP 500 (retrying: 3 more
    /// attempts)`, `URL: no answer within 10 s (still trying)`, `URL: not sent: ...`, joined with `; `.
    private func testAlertNotReached(_ entries: [TestAlertReceipt.Entry]) -> JSONObject {
        var object: JSONObject = [:]
        var notify: [String] = []
        for entry in entries {
            let target = entry.destination.target
            switch (entry.destination.output, entry.outcome) {
            case (_, .delivered?), (_, .acknowledged?):
                continue
            case ("mqtt", _):
                object["mqtt"] = .string(mqttNotReached)
            case (_, .failed(let problem, _, let retriesLeft)?):
                notify.append("\(target): \(problem) (\(Self.retriesText(retriesLeft)))")
            case (_, .notSent(let problem)?):
                notify.append("\(target): not sent: \(problem)")
            case (_, nil):
                notify.append("\(target): no answer within \(Int(TestAlertReceipt.deadlineSeconds)) s (still trying)")
            }
        }
        if !notify.isEmpty { object["notify"] = .string(notify.joined(separator: "; ")) }
        return object
    }

    /// `retrying: 3 more attempts`, `retrying: 1 more attempt`, `not retried`.
    static func retriesText(_ count: Int) -> String {
        count > 0 ? "retrying: \(count) more attempt\(count == 1 ? "" : "s")" : "not retried"
    }

    /// A command from the MQTT broker (on its connection's thread): applied on the control queue.
    fileprivate func apply(_ command: MQTTSink.Command) {
        control.async { [self] in
            switch command {
            case .setGroup(let group, true):
                if !unmuteGroup(group, by: Self.byMQTT) { routeControls() }  // echo the unchanged state
            case .setGroup(let group, false):
                // `[detection]`'s default duration; a switch already off renews it.
                muteGroup(group, minutes: muteDefaults.withLock { $0.defaultMinutes(of: group) }, by: Self.byMQTT)
            case .setSleep(let start):
                let reply = handleSleep(start ? "sleep_start" : "sleep_stop")
                if reply["type"]?.stringValue == "error" || reply["state"]?.stringValue == "already_running" {
                    routeControls()  // echo the unchanged state
                }
            case .testAlert:
                // Nobody waits for the reply: only a refusal is said (the results are not).
                sendTestAlert(requestedBy: "MQTT (Home Assistant's Test alert button)") { [journal] reply in
                    if reply["type"]?.stringValue == "error", let message = reply["message"]?.stringValue {
                        journal.log("MQTT: \(message)", priority: 4)
                    }
                }
            }
        }
    }

    // MARK: Lifecycle

    private func reload() {
        guard !stopping.load(ordering: .acquiring) else { return }
        _ = try? notifier.reloading(status: "reloading configuration")
        do {
            var read = try DaemonConfiguration.load(path: commandLine.configPath, overrides: commandLine.overrides)
            try read.readNotifyURLs()
            let fresh = read
            try fresh.checkStoragePaths()
            let model = try BuiltInClassifier.shared()
            let loaded = try fresh.loadHeadModels(previous: heads)
            // `[sleep] model` is read again when its path changed (as before sessions moved into the stage).
            let snoreHead = try fresh.loadSnoreHead()
            let plan = try DetectionPlan(
                configuration: fresh, yamnetLabels: model.classLabels, heads: loaded.set, configPath: commandLine.configPath)
            let groups = plan.groups
            // `[notify]`'s new URLs get their libcurl handles before anything changes.
            let notifyChange = try notifyReconfiguration(fresh.notify)
            // What shapes events unchanged (window, gate, groups, alarms, the models' labels): open events go on
            // and the window grid stays; only reloaded model weights are swapped in, and new snore thresholds
            // ([sleep] threshold, rhythm_threshold) apply in place. Otherwise the stage ends only the events that
            // cannot go on (a group's threshold alone ends none; see DetectionStage.reconfigure).
            let eventsUnchanged = fresh.analysis == configuration.analysis && fresh.detection == configuration.detection
                && fresh.alarms == configuration.alarms && loaded.set.classLabels == heads.classLabels
                && fresh.sleep.modelPath == configuration.sleep.modelPath
            let snoreSettings = fresh.sleep.detectorConfiguration
            let snoreSettingsChanged = snoreSettings != configuration.sleep.detectorConfiguration
            let failure: EarshotError? = analysisQueue.sync {
                // A shutdown that began while the files were read has stopped the pipeline: leave it stopped.
                if stopping.load(ordering: .acquiring) { return EarshotError(.unavailable, "the daemon is stopping") }
                do throws(EarshotError) {
                    if eventsUnchanged, !snoreSettingsChanged || pipeline.updateSnoreThresholds(snoreSettings),
                       pipeline.replaceHeads(loaded.set)
                    {
                        return nil
                    }
                    try pipeline.reconfigure(
                        plan: plan, heads: loaded.set, snoreHead: snoreHead,
                        snoreHeadChanged: fresh.sleep.modelPath != configuration.sleep.modelPath)
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
            server.setKnownGroups(plan.subscribable, unwatched: plan.unwatched)
            controlGroups.withLock { $0 = (plan.stateGroups, plan.eventGroups) }
            // A group no longer watched is no longer muted (trial 16 L1: its mute stayed in the status, and unmute
            // refused it): no unmute is told, since nothing of it is heard either way.
            for group in mutes.forget(groupsNotIn: Set(plan.stateGroups)) {
                muteRecord?.unmuted(group)
                journal.log("\(group) is no longer muted: the reload stopped watching it")
            }
            muteDefaults.withLock { $0 = fresh.mutes }
            routeControls()
            var restartNeeded: [String] = []
            if fresh.capture != capture { restartNeeded.append("[capture]") }
            if fresh.output != output { restartNeeded.append("[output]") }
            if fresh.history != historySettings { restartNeeded.append("[history]") }
            if fresh.clips != clipSettings { restartNeeded.append("[clips]") }
            if fresh.mqtt != mqttSettings { restartNeeded.append("[mqtt]") }
            if fresh.metrics != configuration.metrics { restartNeeded.append("[metrics]") }
            var notifyNote = ""
            switch notifyChange {
            case .restartNeeded: restartNeeded.append("[notify] (turning notifications on or off)")
            case .apply(let change):
                notifySink?.apply(change)
                notifyNote = change.urlsChanged
                    ? "; [notify] now notifies \(notifySink?.testAlertDestinations.map(\.target).joined(separator: ", ") ?? "")"
                    : "; [notify] changes applied"
            case .none: break
            }
            analysisQueue.async { [sleep] in sleep.reconfigure(fresh.sleep) }
            configuration = fresh
            noteSettings(fresh)
            status.withLock { $0.reloadError = nil }
            let note = restartNeeded.isEmpty ? "" : "; changes to \(restartNeeded.joined(separator: " and ")) take effect after a restart"
            journal.log("configuration reloaded: watching \(groups.map(\.name).joined(separator: ", "))\(notifyNote)\(note)")
        } catch {
            // A stop that began meanwhile left the pipeline stopped: nothing to tell.
            guard !stopping.load(ordering: .acquiring) else { return }
            // A URL the error quotes from the file is shown cut, as at start: this line goes to every output.
            let line = (error as? EarshotError).map {
                DaemonConfiguration.redactingURLs(in: $0, configPath: commandLine.configPath).message
            } ?? "\(error)"
            // Every output hears it (the journal as `health config_reload_failed`), and the status reply shows it
            // until a reload succeeds: `systemctl reload` reports success whatever the file says.
            let message = "\(DisplayText.escaped(line)); running the previous configuration"
            let time = Date()
            status.withLock { $0.reloadError = (message, time) }
            router.route(.health(HealthEvent(state: .configReloadFailed, message: message)), at: time)
        }
        _ = try? notifier.ready(status: "listening to \(sourceDescription)")
    }

    /// What a reload does with `[notify]` (trial 15 M4).
    private enum NotifyChange {
        case none
        /// Notifications turned on or off: the sink is made (or not) at start.
        case restartNeeded
        case apply(NotifySink.Reconfiguration)
    }

    /// `fresh`, a reload's `[notify]`, against the running one: nothing to do, a restart needed (turned on or off),
    /// or the sink's reconfiguration (its new URLs' handles made). The node stays the running one's: it comes from
    /// `[mqtt] node`, which changes at a restart.
    /// - Throws: `EarshotError(.system)` when libcurl cannot make a handle.
    private func notifyReconfiguration(_ fresh: DaemonConfiguration.Notify) throws(EarshotError) -> NotifyChange {
        guard let notifySink else { return fresh.enabled ? .restartNeeded : .none }
        guard fresh.enabled else { return .restartNeeded }
        var fresh = fresh
        fresh.node = notifySink.settings.node
        let change = try notifySink.prepare(fresh)
        return change.changed ? .apply(change) : .none
    }

    /// How long a stop may take, in seconds, before the daemon exits without waiting for the rest: 4 s, inside the
    /// 5 s a supervisor may be promised with 1 s for the exit itself on a loaded machine (4.5 s left 0.5 s, and a
    /// run of the whole test suite once measured 5.12 s); systemd's default stop timeout is 90 s, then SIGKILL loses
    /// open events.
    static let stopDeadlineSeconds = 4.0
    /// The part of ``stopDeadlineSeconds`` kept for the local sinks after the network ones (notifications, MQTT)
    /// have had theirs, counted from the start of the stop: 1 s, for the socket's flush of clients that are behind
    /// (0.5 s), the history's commit and the exit.
    static let localStopReserveSeconds = 1.0
    /// How long the clips cut at the stop and the sleep report's files are waited for before the outputs stop,
    /// counted from the start of the stop: 1 s (a 70 s clip takes milliseconds on a working disk). What a slow disk
    /// has not written by then is written after the socket's goodbye, said in the journal only, until
    /// ``exitReserveSeconds`` before ``stopDeadlineSeconds``.
    static let clipStopSeconds = 1.0
    /// The end of ``stopDeadlineSeconds`` kept for the last lines and the exit: 0.25 s.
    static let exitReserveSeconds = 0.25
    /// How long the stop waits for one local sink (what was routed to it, then its stop) before it goes on without
    /// it: 1 s, twice the socket's own wait for clients that are behind (0.5 s).
    static let localSinkPatienceSeconds = 1.0

    /// The journal line for local sinks the stop did not wait for: `the stop did not wait for the journal output: it
    /// was still busy after 1 s (writing to a journal or a disk that does not take it?)`.
    package static func leftBehindLine(_ names: [String]) -> String {
        let outputs = names.count == 1 ? "the \(names[0]) output" : "the \(names.joined(separator: ", ")) outputs"
        let was = names.count == 1 ? "it was" : "they were"
        return "the stop did not wait for \(outputs): \(was) still busy after \(SettingRules.format(localSinkPatienceSeconds)) s (writing to a journal or a disk that does not take it?)"
    }

    /// The journal line for clips still not written at the end of the stop: `2 clips were not saved:
    /// /var/lib/earshot/clips had not taken them 3.75 s into the stop (smoke_alarm at stream time 12.30 s, baby_cry
    /// at stream time 40.10 s); check that disk`.
    package static func unsavedClipsLine(_ clips: [String], directory: String) -> String {
        let count = clips.count == 1 ? "1 clip was" : "\(clips.count) clips were"
        let seconds = SettingRules.format(stopDeadlineSeconds - exitReserveSeconds)
        return "\(count) not saved: \(directory) had not taken \(clips.count == 1 ? "it" : "them") \(seconds) s into the stop (\(clips.joined(separator: ", "))); check that disk"
    }

    /// Stops in the reverse order of start, each step finishing its work, then exits with `status`. Only the first
    /// call does anything (a signal and the end of the input may race); it may run on the stop queue while a
    /// reload waits on the control queue. Past ``stopDeadlineSeconds`` a watchdog thread writes which step was still
    /// running and exits with `status` at once. Clips and sleep reports the disk has not written within ``clipStopSeconds`` are written
    /// after the outputs stopped. `warnings` are logged (priority 4) once the outputs are delivered,
    /// then `stopped (REASON)`, or `lastLine` instead when the stop has a cause to read (an input that failed: its
    /// error line), which the deadline thread writes too.
    private func shutdown(
        reason: String, status: Int32, warnings: [String] = [], lastLine: (text: String, priority: Int)? = nil
    ) {
        let (first, _) = stopping.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing)
        guard first else { return }
        let stopStarted = DispatchTime.now()
        // From here the socket's commands are answered "the daemon is stopping" (its status still answers).
        link.phase.store(.stopping, ordering: .releasing)
        startStopDeadline(status: status, lastLine: lastLine)
        _ = try? notifier.stopping(status: "stopping: \(reason)")
        // A signal during `run()`'s start: what it starts (the sinks, the capture, the timers) is stopped below.
        stopStep.withLock { $0 = "waiting for the start to finish" }
        starting.wait()
        stopStep.withLock { $0 = "stopping capture" }
        supervisor.stop()
        stopStep.withLock { $0 = "draining the analysis queue" }
        let reportDirectory = analysisQueue.sync {
            pipeline.stop()
            if sleep.isActive { _ = sleep.stop(at: clock.now(), reason: .shutdown) }
            // Final: the schedule's timer and a reload's queued reconfigure start no session after this.
            sleep.shutDown()
            // Clips still waiting for their post-roll end with the audio there is.
            clips?.finish()
            return sleep.reportDirectory
        }
        stopStep.withLock { $0 = "writing sleep reports and clips" }
        // A slow disk does not take the network outputs' time: what it has not written within the first second is
        // held until they and the socket have stopped (below). The report itself went out as the snore_report line.
        let firstSecond = stopStarted + .milliseconds(Int(Self.clipStopSeconds * 1000))
        let reportsWritten = sleep.finishReports(until: firstSecond)
        let clipsWritten = clipWriter?.finishWrites(until: firstSecond) ?? true
        // The mutes in force are on disk for the next start (their file is written as they change).
        if muteRecord?.finishWrites(until: firstSecond) == false {
            journal.log("the smoke, CO and fire mutes were not recorded within \(SettingRules.format(Self.clipStopSeconds)) s of the stop: the next start may not tell the phone of them", priority: 4)
        }
        statisticsTimer?.cancel()
        stopStep.withLock { $0 = "delivering outputs to the sinks" }
        // A webhook or broker that does not answer gets what is left of the stop's time but the local sinks' share:
        // the socket's `shutdown` line and the history's commit never wait for a server.
        // A local sink that does not finish within its patience (stuck writing to a journal or a disk) is left
        // behind, and the next one stops: the socket's `shutdown` line goes out anyway.
        let leftBehind = router.stop(
            networkDeadline: stopStarted + .milliseconds(Int((Self.stopDeadlineSeconds - Self.localStopReserveSeconds) * 1000)),
            localPatience: .milliseconds(Int(Self.localSinkPatienceSeconds * 1000)))
        // Never waits for the journal or standard error (entries and lines wait on their writers; flushed below, at
        // most 0.25 s in all).
        if !leftBehind.isEmpty { journal.log(Self.leftBehindLine(leftBehind), priority: 4) }
        if let writer = historySink?.recorder.writer, writer.statistics.backlog > 0 {
            let count = writer.statistics.backlog
            journal.log("\(count) finished event\(count == 1 ? " was" : "s were") not stored: the history \(writer.path) could not be written (see the history_unavailable message)", priority: 4)
        }
        let deadline = stopStarted + .milliseconds(Int((Self.stopDeadlineSeconds - Self.exitReserveSeconds) * 1000))
        if !reportsWritten {
            stopStep.withLock { $0 = "writing the sleep report the disk had not taken" }
            if !sleep.finishReports(until: deadline) {
                journal.log(SleepService.unwrittenAtStopLine(
                    directory: reportDirectory, seconds: Self.stopDeadlineSeconds - Self.exitReserveSeconds), priority: 3)
            }
        }
        if let clipWriter {
            if !clipsWritten { stopStep.withLock { $0 = "writing the clips the disk had not taken" } }
            let unsaved = clipWriter.close(deadline: deadline)
            if !unsaved.isEmpty {
                journal.log(Self.unsavedClipsLine(unsaved, directory: clipSettings.directory), priority: 3)
            }
        }
        watchdog?.cancel()
        for line in warnings { journal.log(line, priority: 4) }
        if let lastLine {
            journal.log(lastLine.text, priority: lastLine.priority)
        } else {
            journal.log("stopped (\(reason))")
        }
        journal.flush(patience: .milliseconds(Int(Self.exitReserveSeconds * 1000)))
        // `_exit`, not `exit`: a notification the stop left waiting for its server is still inside libcurl on another
        // thread, and `exit` would run the atexit handlers under it (OpenSSL's OPENSSL_cleanup, registered through
        // libcurl or libmosquitto). Everything the daemon says went out with write(2) or sd_journal_sendv; stdio
        // holds nothing of its own, and is flushed for the libraries'.
        fflush(nil)
        _exit(status)
    }

    /// A thread of its own (not Dispatch's pool, which a stuck queue may have used up) that ends the process if the
    /// stop is not done by ``stopDeadlineSeconds``; it writes `lastLine` (the cause of the stop) after its own.
    private func startStopDeadline(status: Int32, lastLine: (text: String, priority: Int)?) {
        do {
            try startThread(named: "earshot-stop") { [self] in
                usleep(UInt32(Self.stopDeadlineSeconds * 1_000_000))
                let running = stopStep.withLock { $0 }
                journal.log("stop did not finish within \(SettingRules.format(Self.stopDeadlineSeconds)) s (still \(running)); exiting without waiting for it", priority: 3)
                if let lastLine { journal.log(lastLine.text, priority: lastLine.priority) }
                journal.flush(patience: .milliseconds(Int(Self.exitReserveSeconds * 1000)))
                _exit(status)
            }
        } catch {
            journal.log("no stop deadline: \(error.message)", priority: 4)
        }
    }
}

/// Lets the closures components are given during ``EarshotDaemon/init(commandLine:)`` reach the daemon once it
/// exists (socket commands and status replies, opening the capture source, capture state), and tells the socket's
/// commands where the daemon is in its life. `daemon` is set once at the end of init; the capture and the sinks
/// start later, in `run()`, but the socket answers from the moment it exists, before the daemon is complete.
private final class DaemonLink: @unchecked Sendable {
    /// Where the daemon is, as the socket's commands see it: `starting` until the end of init, `running`, then
    /// `stopping` from the first step of the shutdown to the exit.
    enum Phase: UInt8, AtomicRepresentable {
        case starting, running, stopping
    }

    weak var daemon: EarshotDaemon?
    /// Stored (releasing) after `daemon` is set; loaded (acquiring) before `daemon` is read.
    let phase = Atomic<Phase>(.starting)

    /// How long after its socket opened a starting daemon is waited for, in seconds: 8, under the 10 s that
    /// `earshot status` and `sleep` wait for a reply (`test-alert`, 15 s), so that they print ``stillStarting`` rather
    /// than "no reply within 10 s". (2 s was too short: on a loaded machine a whole-suite test run sent a mute
    /// right after the socket appeared, and the daemon was not complete 2 s later.)
    static let startWaitSeconds = 8
    /// The error reply's message to a command (or a status request) that came while the daemon was starting and
    /// found it still starting ``startWaitSeconds`` after its socket opened.
    static let stillStarting = "the daemon is still starting (not ready \(startWaitSeconds) s after opening its socket); try again in a moment"
    /// The error reply's message to a command that came while the daemon was stopping.
    static let stopping = "the daemon is stopping"

    /// Until when (monotonic nanoseconds) commands wait for a starting daemon: ``startWaitSeconds`` from the
    /// link's creation, just before the socket's. A deadline, not a wait per command: the socket answers one
    /// request at a time, and the ones queued behind the first must not wait 8 s each.
    private let startDeadline = DispatchTime.now().uptimeNanoseconds + UInt64(startWaitSeconds) * 1_000_000_000

    /// The phase, and the daemon unless it is still starting: waits (in 5 ms steps) while the daemon is starting,
    /// at most until ``startDeadline``. The socket's queue.
    private func daemonWhenStarted() -> (phase: Phase, daemon: EarshotDaemon?) {
        while true {
            let phase = phase.load(ordering: .acquiring)
            if phase != .starting { return (phase, daemon) }
            if DispatchTime.now().uptimeNanoseconds >= startDeadline { return (.starting, nil) }
            usleep(5_000)
        }
    }

    /// Replies to a registered socket command: the daemon does once it runs; ``stillStarting`` or ``stopping``
    /// otherwise.
    func answer(_ command: String, group: String?, options: JSONObject, reply: @escaping EventServer.CommandReply) {
        switch daemonWhenStarted() {
        case (.running, let daemon?): daemon.answer(command, group: group, options: options, reply: reply)
        case (.starting, _): reply(["type": "error", "message": .string(Self.stillStarting)])
        default: reply(["type": "error", "message": .string(Self.stopping)])
        }
    }

    /// The status reply's daemon fields: also while the daemon stops (its counters are still true), an error
    /// reply (``stillStarting``) while it starts.
    func status() -> JSONObject {
        switch daemonWhenStarted() {
        case (.starting, _): ["type": "error", "message": .string(Self.stillStarting)]
        case (_, let daemon?): daemon.statusObject()
        case (_, nil): ["type": "error", "message": .string(Self.stopping)]
        }
    }
}
