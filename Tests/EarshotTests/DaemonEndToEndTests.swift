import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// `earshotd` as users run it: the real executable, capturing from a real ALSA PCM (the `file` plugin reading a raw
/// recording as its `infile`), publishing on a real Unix socket, notifying a real sd_notify datagram socket, and
/// stopped with SIGTERM.
///
/// The `infile` does not exist when the daemon starts, so its first open fails like a missing device; the test
/// connects its subscriber, then moves the recording into place, and the daemon's retry (1 s later) captures it.
/// (A FIFO as `infile` would be simpler but is not deterministic: the plugin fills short reads with the slave's
/// silence.)
@Suite(.serialized) struct DaemonEndToEndTests {
    /// The built executables sit beside the test bundle (`.build/<config>/`).
    static let buildDirectory = URL(fileURLWithPath: ModelLocatorTestSupport.executablePath()).deletingLastPathComponent()

    /// A temp directory holding HOME/.asoundrc (the PCM), its infile, the event socket and the notify socket.
    struct Sandbox {
        let directory: URL
        var home: URL { directory.appendingPathComponent("home") }
        var infile: String { directory.appendingPathComponent("capture.raw").path }
        var socket: String { directory.appendingPathComponent("earshot.sock").path }
        var notifySocket: String { directory.appendingPathComponent("notify.sock").path }

        init() throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-e2e-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
            try FileManager.default.createDirectory(at: directory.appendingPathComponent("home"), withIntermediateDirectories: true)
            // The file plugin reads raw S16_LE frames from `infile` at whatever rate is negotiated (16 kHz, our
            // preferred rate); the null slave gives no clock, so capture runs as fast as the file can be read, and
            // after its end the plugin delivers the slave's silence.
            let asoundrc = """
                pcm.earshot_e2e {
                    type file
                    slave.pcm { type null }
                    file "/dev/null"
                    infile "\(infile)"
                    format "raw"
                }
                """
            try asoundrc.write(to: home.appendingPathComponent(".asoundrc"), atomically: true, encoding: .utf8)
        }

        func remove() { try? FileManager.default.removeItem(at: directory) }
    }

    /// A bound AF_UNIX datagram socket standing in for systemd's NOTIFY_SOCKET.
    final class NotifyListener {
        let fd: Int32
        init(path: String) throws {
            fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (i, byte) in path.utf8.enumerated() { raw[i] = byte }
            }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            #expect(bound == 0)
        }
        deinit { close(fd) }

        /// Datagrams received within `seconds`, until one contains `needle`.
        func messages(until needle: String, seconds: Double) -> [String] {
            var result: [String] = []
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, 100) > 0 else { continue }
                var buffer = [UInt8](repeating: 0, count: 4096)
                let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                guard count > 0 else { continue }
                let message = String(decoding: buffer[0..<count], as: UTF8.self)
                result.append(message)
                if message.contains(needle) { break }
            }
            return result
        }
    }

    /// The reference's exact 16 kHz input for the freedesktop alarm clock, as raw S16_LE.
    static func alarmClockRaw() throws -> Data {
        let data = try Data(contentsOf: TestPaths.sharedFile("golden/alarm-clock-elapsed.wave16k.f32"))
        var out = Data(capacity: data.count / 2)
        data.withUnsafeBytes { raw in
            for i in 0..<(data.count / 4) {
                let value = Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: i * 4, as: UInt32.self)))
                let sample = Int16(max(-32768, min(32767, (value * 32768).rounded())))
                withUnsafeBytes(of: sample.littleEndian) { out.append(contentsOf: $0) }
            }
        }
        return out
    }

    /// This process's environment with HOME pointing at the sandbox (its .asoundrc defines the test PCM) and
    /// without the sd_notify variables other suites set while they run in parallel.
    static func environment(home: URL) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] { environment[name] = nil }
        environment["HOME"] = home.path
        // The daemon's history, clips and reports go to the sandbox, never into the machine's /var/lib/earshot.
        let state = home.appendingPathComponent("state")
        try? FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        environment["STATE_DIRECTORY"] = state.path
        return environment
    }

    static func parse(_ line: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:]
    }

    @Test(.needsShared) func smokeAlarmFromALSACaptureReachesSubscriberWithItsStreamTime() throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let notify = try NotifyListener(path: sandbox.notifySocket)

        let daemon = Process()
        daemon.executableURL = Self.buildDirectory.appendingPathComponent("earshotd")
        // The classifier group alone: the alarm clock scores 0.70 on "Smoke detector, smoke alarm". This test is about
        // capture -> socket timing; with [alarms] pattern_detection (the default) the clock raises no smoke_alarm.
        let config = sandbox.directory.appendingPathComponent("classifier-only.conf")
        try "[alarms]\npattern_detection = false\n".write(to: config, atomically: true, encoding: .utf8)
        daemon.arguments = ["--config", config.path, "--device", "earshot_e2e", "--socket", sandbox.socket,
                            "--watch", "smoke_alarm,baby_cry", "--no-journal"]
        var environment = Self.environment(home: sandbox.home)
        environment["NOTIFY_SOCKET"] = sandbox.notifySocket
        daemon.environment = environment
        let stderrPipe = Pipe()
        daemon.standardError = stderrPipe
        try daemon.run()
        defer { if daemon.isRunning { daemon.terminate() } }

        // The socket exists before capture starts; the first open fails (no infile yet) and is retried after 1 s.
        var subscriber: EventSubscriber?
        for _ in 0..<100 where subscriber == nil {
            subscriber = try? EventSubscriber(path: sandbox.socket)
            if subscriber == nil { Thread.sleep(forTimeInterval: 0.05) }
        }
        let client = try #require(subscriber, "earshotd did not create its socket")
        try client.subscribe(groups: ["smoke_alarm"])

        // The recording appears atomically (written beside, then renamed into place).
        let staging = sandbox.directory.appendingPathComponent("staging.raw")
        try Self.alarmClockRaw().write(to: staging)
        #expect(rename(staging.path, sandbox.infile) == 0)

        var lines: [[String: Any]] = []
        while lines.last?["type"] as? String != "detection_end" {
            guard case .line(let line) = try client.readLine(timeoutSeconds: 20) else { break }
            lines.append(Self.parse(line))
        }
        let onset = try #require(lines.first { $0["type"] as? String == "detection" })
        let end = try #require(lines.first { $0["type"] as? String == "detection_end" })
        // Reference scores for "Smoke detector, smoke alarm" per 0.48 s window: 0.021 0.702 0.018 0.524 0.018 0.245
        // 0.03 0.366 ...; threshold 0.3, 2 of 3 windows: the onset is decided at window 3 and starts at window 1
        // (0.48 s); window 7 (3.36 s) is positive within the 3 s hold, so the event ends at 3.36 + 0.96 = 4.32 s.
        #expect(onset["group"] as? String == "smoke_alarm")
        #expect(onset["class"] as? String == "Smoke detector, smoke alarm")
        #expect(onset["stream_time"] as? Double == 0.48)
        // The daemon's confidence equals offline analysis of the same 16-bit samples (the max over the onset run's
        // positive windows 1 and 3). 16-bit quantisation itself moves these scores by up to 0.03 from the float
        // reference, because this recording's quiet bands sit near YAMNet's log offset.
        let quantized = try Self.alarmClockRaw().withUnsafeBytes { raw in
            (0..<(raw.count / 2)).map { Float(Int16(littleEndian: raw.loadUnaligned(fromByteOffset: $0 * 2, as: Int16.self))) / 32768 }
        }
        let offline = try YAMNet.builtIn().makeSession().analyze(waveform: quantized).scores
        let smoke = 393  // "Smoke detector, smoke alarm"
        let expectedConfidence = Double(max(offline[521 + smoke], offline[3 * 521 + smoke]))
        #expect(abs((onset["confidence"] as? Double ?? 0) - expectedConfidence) < 1e-3, "expected \(expectedConfidence)")
        #expect(end["start"] as? Double == 0.48)
        #expect(end["end"] as? Double == 4.32)
        #expect(end["windows"] as? Int == 3)
        let health = lines.filter { $0["type"] as? String == "health" }.compactMap { $0["state"] as? String }
        #expect(health.prefix(2) == ["capture_unavailable", "capture_live"] || health.first == "capture_live")

        // READY=1 once audio flowed; SIGTERM: STOPPING=1, exit 0, socket removed.
        let ready = notify.messages(until: "READY=1", seconds: 5)
        #expect(ready.contains { $0.contains("READY=1") })
        daemon.terminate()
        let stopping = notify.messages(until: "STOPPING=1", seconds: 5)
        #expect(stopping.contains { $0.contains("STOPPING=1") })
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 0)
        #expect(!FileManager.default.fileExists(atPath: sandbox.socket))
        let log = String(decoding: stderrPipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(log.contains("earshotd: smoke_alarm detected: \"Smoke detector, smoke alarm\""))
    }

    @Test func missingDeviceSaysSoAndRetries() throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let daemon = Process()
        daemon.executableURL = Self.buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = ["--device", "hw:97,0", "--socket", sandbox.socket, "--foreground"]
        daemon.environment = Self.environment(home: sandbox.home)
        let out = Pipe(), err = Pipe()
        daemon.standardOutput = out
        daemon.standardError = err
        try daemon.run()
        Thread.sleep(forTimeInterval: 1.5)
        #expect(daemon.isRunning, "the daemon keeps running and retries")
        // Its memory diet (README, Performance): the Swift runtime is linked in statically, Foundation's ICU and
        // CoreFoundation are not in the process at all, OpenBLAS is loaded only where a product needs it, and the
        // libraries of outputs that are off ([notify]: libcurl, [metrics]: libmicrohttpd, [mqtt]: libmosquitto with
        // its libssl and libcrypto) are not loaded.
        let maps = (try? String(contentsOfFile: "/proc/\(daemon.processIdentifier)/maps", encoding: .utf8)) ?? ""
        #expect(maps.contains("earshotd"), "cannot read the daemon's memory map")
        for library in ["libswiftCore.so", "libFoundation.so", "lib_FoundationICU.so", "libFoundationEssentials.so",
                        "libcurl", "libmicrohttpd", "libmosquitto", "libssl.so", "libcrypto.so"] {
            #expect(!maps.contains(library), "earshotd maps \(library)")
        }
        if GEMMKernel.current != .openBLAS { #expect(!maps.contains("libopenblas"), "earshotd loaded OpenBLAS without using it") }
        daemon.terminate()
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 0)
        let log = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let firstLine = log.split(separator: "\n").first.map(String.init) ?? ""
        #expect(firstLine.hasPrefix("earshotd: health capture_unavailable: cannot open capture device \"hw:97,0\""), "\(log)")
        #expect(firstLine.hasSuffix("(no such device; list devices with `earshot devices` or `arecord -L`) (retrying in 1 s, then twice as long each time, up to every 4 s)"), "\(firstLine)")
        let events = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(events.contains("\"state\":\"capture_unavailable\""))
    }

    /// ALSA's `jack` plugin (libasound2-plugins) is installed and no JACK server runs (a server's socket sits in
    /// /dev/shm as `jack_default_UID_0`, jackd1's directory as `jack-UID`; `jack_db-UID` is the clients' metadata).
    static var jackPluginWithoutServer: Bool {
        let plugins = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"]
            .map { $0 + "/alsa-lib/libasound_module_pcm_jack.so" }
        let serverFiles = (try? FileManager.default.contentsOfDirectory(atPath: "/dev/shm"))?
            .filter { $0.hasPrefix("jack_default_") || $0.hasPrefix("jack-") } ?? []
        return plugins.contains { FileManager.default.fileExists(atPath: $0) } && serverFiles.isEmpty
    }

    /// `--device jack` (the plugin's system definition) and a `plug` PCM over it, with no JACK server: libjack's
    /// own lines ("Cannot connect to server socket ...", "jack server is not running ...") never reach stderr, on
    /// the first attempt or the retries (at 1 and 3 s); the daemon says once, as a health event, why capture is
    /// unavailable, and keeps retrying.
    @Test(.enabled(if: jackPluginWithoutServer, "needs ALSA's jack plugin (libasound2-plugins) and no JACK server running"))
    func jackDeviceWithoutServerIsOneHealthLine() throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let asoundrc = sandbox.home.appendingPathComponent(".asoundrc")
        let definitions = try String(contentsOf: asoundrc, encoding: .utf8) + "\npcm.earshot_jack { type plug; slave.pcm \"jack\" }\n"
        try definitions.write(to: asoundrc, atomically: true, encoding: .utf8)
        for device in ["jack", "earshot_jack"] {
            let daemon = Process()
            daemon.executableURL = Self.buildDirectory.appendingPathComponent("earshotd")
            daemon.arguments = ["--device", device, "--socket", sandbox.socket, "--foreground"]
            var environment = Self.environment(home: sandbox.home)
            environment["JACK_NO_START_SERVER"] = "1"  // where jackd is installed, libjack would start one
            daemon.environment = environment
            let out = Pipe(), err = Pipe()
            daemon.standardOutput = out
            daemon.standardError = err
            try daemon.run()
            Thread.sleep(forTimeInterval: 3.5)
            #expect(daemon.isRunning, "the daemon keeps running and retries")
            daemon.terminate()
            daemon.waitUntilExit()
            #expect(daemon.terminationStatus == 0)
            let message = "cannot open capture device \"\(device)\": the JACK server is not running (start it, e.g. with qjackctl or jackd, or choose another device; list devices with `earshot devices`) (retrying in 1 s, then twice as long each time, up to every 4 s)"
            let log = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(log == "earshotd: health capture_unavailable: \(message)\nearshotd: stopped (signal 15)\n")
            let events = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                .split(separator: "\n").map { Self.parse(String($0)) }
            let health = events.filter { $0["type"] as? String == "health" }
            #expect(health.map { $0["state"] as? String } == ["capture_unavailable"], "\(events)")
            #expect(health.first?["message"] as? String == message)
        }
    }

    /// Reads the daemon's stderr until a line containing `needle` arrives (or `seconds` pass).
    static func waitForLine(_ needle: String, in handle: FileHandle, seconds: Double, collected: inout String) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if collected.contains(needle) { return true }
            var poller = pollfd(fd: handle.fileDescriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) > 0 else { continue }
            let data = handle.availableData
            if data.isEmpty { break }
            collected += String(decoding: data, as: UTF8.self)
        }
        return collected.contains(needle)
    }

    @Test func sighupReloadsAndKeepsRunningConfigurationOnError() throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let config = sandbox.directory.appendingPathComponent("earshotd.conf")
        try "[detection]\nwatch = smoke_alarm\n".write(to: config, atomically: true, encoding: .utf8)
        let daemon = Process()
        daemon.executableURL = Self.buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = ["--config", config.path, "--device", "hw:97,0", "--socket", sandbox.socket, "--no-journal"]
        daemon.environment = Self.environment(home: sandbox.home)
        let err = Pipe()
        daemon.standardError = err
        try daemon.run()
        defer { if daemon.isRunning { daemon.terminate() } }
        var log = ""
        #expect(Self.waitForLine("capture_unavailable", in: err.fileHandleForReading, seconds: 10, collected: &log))

        try "[detection]\nwatch = smoke_alarm | kettle\n".write(to: config, atomically: true, encoding: .utf8)
        kill(daemon.processIdentifier, SIGHUP)
        let failed = "earshotd: health config_reload_failed: \(config.path):2: [detection] watch: \"kettle\" is not a group (groups: baby_cry, co_alarm, dog_bark, doorbell_knock, fire_alarm, glass_break, loud, smoke_alarm, snoring, speech; a new group needs a [group.kettle] section with classes and threshold); running the previous configuration\n"
        #expect(Self.waitForLine(failed, in: err.fileHandleForReading, seconds: 10, collected: &log), "\(log)")
        #expect(daemon.isRunning)

        try "[detection]\nwatch = smoke_alarm | baby_cry\n".write(to: config, atomically: true, encoding: .utf8)
        kill(daemon.processIdentifier, SIGHUP)
        #expect(Self.waitForLine("earshotd: configuration reloaded: watching smoke_alarm, baby_cry\n", in: err.fileHandleForReading, seconds: 10, collected: &log), "\(log)")

        let client = try EventSubscriber(path: sandbox.socket)
        try client.send(line: #"{"status":true}"#)
        guard let reply = try client.nextReply(timeoutSeconds: 5) else {
            Issue.record("no status reply")
            return
        }
        #expect(Self.parse(reply)["watch"] as? [String] == ["smoke_alarm", "baby_cry"])
        daemon.terminate()
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 0)
    }

    @Test(.needsShared) func fallbackInputStreamsTheFileWhenTheDeviceCannotOpen() throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let source = TestPaths.sharedFile("audio/debian-brainparty-data/games/brainparty/glass_break.wav")
        let daemon = Process()
        daemon.executableURL = Self.buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = ["--device", "hw:97,0", "--socket", sandbox.socket, "--foreground", "--watch", "glass_break",
                            "--fallback-input", source.path]
        daemon.environment = Self.environment(home: sandbox.home)
        let out = Pipe(), err = Pipe()
        daemon.standardOutput = out
        daemon.standardError = err
        try daemon.run()
        daemon.waitUntilExit()  // the 1.0 s file streams in real time, then the daemon exits
        #expect(daemon.terminationStatus == 0)
        let log = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(log.hasPrefix("earshotd: cannot open capture device \"hw:97,0\": No such file or directory (no such device; list devices with `earshot devices` or `arecord -L`); streaming \(source.path) through the live pipeline instead\n"), "\(log)")
        let events = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .split(separator: "\n").map { Self.parse(String($0)) }
        let onset = try #require(events.first { $0["type"] as? String == "detection" })
        #expect(onset["group"] as? String == "glass_break")
        // Decided by the second window (0.48 s): the shatter at 0.01 s is confirmed once 1.0 s of audio after it
        // is in (its late level), and that window scores "Shatter" above the first window's "Glass".
        #expect(onset["class"] as? String == "Shatter")
        #expect(onset["stream_time"] as? Double == 0.48)
        // The finished event went to the history under $STATE_DIRECTORY (the sandbox), not /var/lib/earshot.
        let history = try EventHistory(path: sandbox.home.appendingPathComponent("state/history.sqlite3").path, access: .readOnly)
        let stored = try history.events()
        #expect(stored.map(\.group) == ["glass_break"], "\(log)")
    }

    @Test(.needsShared) func eventsTheHistoryCouldNotTakeAreCountedAtStop() throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let source = TestPaths.sharedFile("audio/debian-brainparty-data/games/brainparty/glass_break.wav")
        let daemon = Process()
        daemon.executableURL = Self.buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = ["--input", source.path, "--socket", sandbox.socket, "--foreground", "--watch", "glass_break"]
        var environment = Self.environment(home: sandbox.home)
        let missing = sandbox.home.appendingPathComponent("no-such-state").path
        environment["STATE_DIRECTORY"] = missing
        daemon.environment = environment
        let err = Pipe()
        daemon.standardOutput = FileHandle.nullDevice
        daemon.standardError = err
        try daemon.run()
        let log = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 0)
        #expect(log.contains("earshotd: health history_unavailable: event history \(missing)/history.sqlite3: cannot open"), "\(log)")
        #expect(log.hasSuffix("earshotd: 1 finished event was not stored: the history \(missing)/history.sqlite3 could not be written (see the history_unavailable message)\nearshotd: stopped (end of input)\n"), "\(log)")
    }

    /// Runs `earshotd` with `arguments` to its exit (killed after `seconds`: a hang fails the test, not CI).
    static func runToExit(_ arguments: [String], home: URL, seconds: Double = 20) throws -> (status: Int32, stderr: String) {
        let daemon = Process()
        daemon.executableURL = buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = arguments
        daemon.environment = environment(home: home)
        let err = Pipe()
        daemon.standardError = err
        try daemon.run()
        let watchdog = DispatchWorkItem { if daemon.isRunning { daemon.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds, execute: watchdog)
        let log = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        daemon.waitUntilExit()
        watchdog.cancel()
        return (daemon.terminationStatus, log)
    }

    /// An input that cannot be read ends the daemon with one line, its error (no `stopped (input failed)` after
    /// it), and the status `earshotd --help` lists: 66 input file missing, 65 input file not audio.
    @Test func inputThatCannotBeReadEndsTheDaemonWithItsStatus() throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let missing = try Self.runToExit(
            ["--input", "/nonexistent/earshot.flac", "--socket", sandbox.socket, "--no-journal"], home: sandbox.home)
        #expect(missing.status == 66)
        #expect(missing.stderr == "earshotd: /nonexistent/earshot.flac: no such file (check the path)\n")

        let text = sandbox.directory.appendingPathComponent("notes.wav")
        try Data("hello, this is text and not audio\n".utf8).write(to: text)
        let notAudio = try Self.runToExit(["--input", text.path, "--socket", sandbox.socket, "--no-journal"], home: sandbox.home)
        #expect(notAudio.status == 65)
        #expect(notAudio.stderr == "earshotd: \(text.path): not an audio file libsndfile can read (Format not recognised; use WAV, FLAC, Ogg or MP3)\n")

        // A WAV whose data chunk claims more bytes than the file holds, cut before its first frame: bad data, exit
        // 65, no retry loop. (One cut later is streamed as far as it goes: DamagedAudioTests.)
        let truncated = sandbox.directory.appendingPathComponent("cut.wav")
        var wav = Data("RIFF".utf8) + Self.le32(36 + 2_000) + Data("WAVEfmt ".utf8) + Self.le32(16)
        wav += Self.le16(1) + Self.le16(1) + Self.le32(16_000) + Self.le32(32_000) + Self.le16(2) + Self.le16(16)
        wav += Data("data".utf8) + Self.le32(2_000) + Data(count: 1)
        try wav.write(to: truncated)
        let cut = try Self.runToExit(["--input", truncated.path, "--socket", sandbox.socket, "--no-journal"], home: sandbox.home)
        #expect(cut.status == 65)
        #expect(cut.stderr == "earshotd: \(truncated.path): truncated: the header declares 2000 bytes of audio data but the file holds 1 (the copy or recording was cut short; copy it again)\n")
    }

    static func le32(_ value: UInt32) -> Data { withUnsafeBytes(of: value.littleEndian) { Data($0) } }
    static func le16(_ value: UInt16) -> Data { withUnsafeBytes(of: value.littleEndian) { Data($0) } }

    /// A socket that cannot be made ends the daemon with one line and its status (it once trapped here: the
    /// wake-up source of the analysis queue was released while still inactive).
    @Test func aSocketThatCannotBeCreatedOrIsTakenExitsWithOneLine() throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let input = sandbox.directory.appendingPathComponent("silence.wav")
        var wav = Data("RIFF".utf8) + Self.le32(36 + 32_000) + Data("WAVEfmt ".utf8) + Self.le32(16)
        wav += Self.le16(1) + Self.le16(1) + Self.le32(16_000) + Self.le32(32_000) + Self.le16(2) + Self.le16(16)
        wav += Data("data".utf8) + Self.le32(32_000) + Data(count: 32_000)
        try wav.write(to: input)
        let missing = sandbox.directory.appendingPathComponent("no-such-dir/earshot.sock").path
        let noDirectory = try Self.runToExit(["--input", input.path, "--socket", missing, "--no-journal"], home: sandbox.home)
        #expect(noDirectory.status == 73)
        #expect(noDirectory.stderr == "earshotd: cannot create socket \(missing): No such file or directory (create the directory, run under systemd with RuntimeDirectory=earshot, or choose another --socket)\n")

        // Another listener on the path.
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = try #require(DaemonBenchmark.unixAddress(sandbox.socket))
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0 && listen(listener, 1) == 0)
        let taken = try Self.runToExit(["--input", input.path, "--socket", sandbox.socket, "--no-journal"], home: sandbox.home)
        #expect(taken.status == 73)  // earshotd --help: 73 socket cannot be created
        #expect(taken.stderr == "earshotd: cannot listen on \(sandbox.socket): another process is already listening there (is earshotd already running? stop it or choose another --socket)\n")
    }

    @Test func badConfigurationValueExits78NamingTheKey() throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let config = sandbox.directory.appendingPathComponent("bad.conf")
        try "[analysis]\noverlap = 1.5\n".write(to: config, atomically: true, encoding: .utf8)
        let daemon = Process()
        daemon.executableURL = Self.buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = ["--config", config.path, "--socket", sandbox.socket]
        daemon.environment = Self.environment(home: sandbox.home)
        let err = Pipe()
        daemon.standardError = err
        try daemon.run()
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 78)
        let log = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(log == "earshotd: \(config.path):2: [analysis] overlap = 1.5: must be in [0, 1)\n")
    }
}

enum ModelLocatorTestSupport {
    /// This test process's executable (the test bundle), from `/proc/self/exe`.
    static func executablePath() -> String {
        ModelLocator.executablePath() ?? ""
    }
}
