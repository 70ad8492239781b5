import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs
import EarshotService

/// Measures a running `earshotd` from outside, as a user would see it in `top`: the daemon is started on a file
/// streamed in real time (`--input FILE`), its READY notification is timed on our own `NOTIFY_SOCKET`, and its CPU
/// time and memory are read from `/proc`.
package enum DaemonBenchmark {
    /// What one run measured.
    package struct Figures: Sendable {
        /// Milliseconds from starting the process to `READY=1` (sent once audio flows: model loaded, input opened).
        package var readyMillis: Double
        /// CPU time (user + system, all threads) over the measured span divided by its wall time, in percent of one
        /// core, from the per-thread nanosecond counters (`/proc/PID/task/*/schedstat`).
        package var cpuPercent: Double
        /// The same share from `/proc/PID/stat` utime + stime (10 ms ticks: coarse below about 0.05 %).
        package var cpuPercentTicks: Double
        /// Seconds measured (after READY and a warm-up).
        package var seconds: Double
        /// Peak resident set size (`VmHWM`) in MB (10^6 bytes), from the start of the process.
        package var peakRSSMegabytes: Double
        /// Resident set size at the end (`VmRSS`) in MB.
        package var rssMegabytes: Double
        /// Its anonymous part at the end (`RssAnon`: heap, stacks, model weights) in MB. The rest is pages of the
        /// executable and libraries, whose count depends on what the page cache holds (a binary just built or copied
        /// maps up to 1 MB more than the same binary after `drop_caches`), so builds are compared on this figure.
        package var anonymousRSSMegabytes: Double
        /// Voluntary context switches per second over the measured span, summed over the daemon's threads alive at
        /// both ends (`/proc/PID/task/*/status`): how often it sleeps and is woken (each wake-up costs CPU time in
        /// the kernel beyond the work done). Unlike the CPU share, this count hardly depends on what else the machine
        /// is doing, so it tells a new periodic timer from noise.
        package var wakeupsPerSecond: Double
        /// Windows the daemon scored and windows it gated (from its status reply; nil when it did not answer).
        package var windows: Int?
        package var gatedWindows: Int?
    }

    /// Starts `daemon` on `input`, waits for READY, lets `warmUp` seconds pass, measures `seconds` seconds, asks for
    /// its status, then stops it with SIGTERM.
    /// - Parameters:
    ///   - extraArguments: more options, e.g. `["--gate-dbfs", "-120"]` to keep the gate open.
    /// - Throws: ``EarshotError`` when the process cannot start, does not send READY within 20 s, or exits early
    ///   (the line names the daemon's last stderr line).
    package static func measure(
        daemon: URL, input: URL, seconds: Double, warmUp: Double = 2, extraArguments: [String] = []
    ) throws(EarshotError) -> Figures {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("earshot-bench-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw EarshotError(.cannotCreate, "cannot create \(directory.path) for the daemon benchmark: \(errorText(error))")
        }
        defer { try? FileManager.default.removeItem(at: directory) }
        let notify = try NotifySocket(path: directory.appendingPathComponent("notify").path)
        let socketPath = directory.appendingPathComponent("earshot.sock").path
        let stderrURL = directory.appendingPathComponent("stderr.txt")

        var environment = ProcessInfo.processInfo.environment
        environment["NOTIFY_SOCKET"] = notify.path
        environment["STATE_DIRECTORY"] = directory.path  // its history goes to the scratch directory, removed after
        environment.removeValue(forKey: "WATCHDOG_USEC")
        environment.removeValue(forKey: "WATCHDOG_PID")
        func lastErrorLine() -> String {
            let text = (try? String(contentsOfFile: stderrURL.path, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").last.map(String.init) ?? "no message"
        }

        let started = Benchmark.now()
        let process = try ChildProcess(
            executable: daemon.path,
            arguments: ["--input", input.path, "--socket", socketPath, "--no-journal"] + extraArguments,
            environment: environment, standardErrorPath: stderrURL.path)
        let pid = process.processIdentifier
        defer {
            if process.isRunning {
                kill(pid, SIGTERM)
                let deadline = Benchmark.now() + 5
                while process.isRunning && Benchmark.now() < deadline { usleep(20_000) }
                if process.isRunning { kill(pid, SIGKILL) }
                process.waitUntilExit()
            }
        }

        var readyAt: Double?
        while readyAt == nil {
            guard process.isRunning else {
                throw EarshotError(.unavailable, "earshotd exited (status \(process.terminationStatus)) before READY: \(lastErrorLine())")
            }
            guard Benchmark.now() - started < 20 else {
                throw EarshotError(.unavailable, "earshotd sent no READY=1 within 20 s: \(lastErrorLine())")
            }
            if let message = notify.receive(timeoutMillis: 50), message.split(separator: "\n").contains("READY=1") {
                readyAt = Benchmark.now()
            }
        }
        let readyMillis = ((readyAt ?? started) - started) * 1000

        sleepSeconds(warmUp)
        let before = ProcessSample(pid: pid)
        let from = Benchmark.now()
        sleepSeconds(seconds)
        let after = ProcessSample(pid: pid)
        let span = Benchmark.now() - from
        guard process.isRunning, let before, let after else {
            throw EarshotError(.unavailable, "earshotd stopped during the measurement (is the input shorter than \(warmUp + seconds) s?): \(lastErrorLine())")
        }
        let status = statusReply(socketPath: socketPath)
        return Figures(
            readyMillis: readyMillis,
            cpuPercent: (after.cpuNanoseconds - before.cpuNanoseconds) / 1e9 / span * 100,
            cpuPercentTicks: (after.cpuTicksSeconds - before.cpuTicksSeconds) / span * 100,
            seconds: span,
            peakRSSMegabytes: after.peakRSSKilobytes * 1024 / 1e6,
            rssMegabytes: after.rssKilobytes * 1024 / 1e6,
            anonymousRSSMegabytes: after.anonymousRSSKilobytes * 1024 / 1e6,
            wakeupsPerSecond: Double(after.voluntarySwitches(since: before)) / span,
            windows: status?["windows"]?.intValue,
            gatedWindows: status?["gated_windows"]?.intValue)
    }

    /// The daemon's `{"type":"status",...}` reply, or nil when it does not answer within 2 s.
    package static func statusReply(socketPath: String) -> JSONValue? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard var address = unixAddress(socketPath) else { return nil }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else { return nil }
        let request = Array("{\"cmd\":\"status\"}\n".utf8)
        guard send(fd, request, request.count, Int32(MSG_NOSIGNAL)) == request.count else { return nil }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = Benchmark.now() + 2
        while Benchmark.now() < deadline {
            let count = recv(fd, &buffer, buffer.count, 0)
            guard count > 0 else { return nil }
            received.append(contentsOf: buffer[0..<count])
            // Events may arrive before the reply: take the first line that is a status object.
            while let newline = received.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(received[..<newline])
                received.removeSubrange(...newline)
                if let object = try? JSONValue.parse(line), object["type"]?.stringValue == "status" {
                    return object
                }
            }
        }
        return nil
    }

    package static func unixAddress(_ path: String) -> sockaddr_un? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }
}

/// CPU time and memory of a process, read from `/proc`.
package struct ProcessSample {
    /// Sum of the run time of the process's live threads in ns (`/proc/PID/task/*/schedstat`, first field) plus
    /// the user + system time of threads that already ended (the difference of `/proc/PID/stat` and the live
    /// threads' ticks is ignored: threads of the daemon live as long as it does).
    package let cpuNanoseconds: Double
    /// utime + stime of `/proc/PID/stat` in seconds (clock ticks, usually 10 ms).
    package let cpuTicksSeconds: Double
    package let peakRSSKilobytes: Double
    package let rssKilobytes: Double
    package let anonymousRSSKilobytes: Double
    /// Each live thread's `voluntary_ctxt_switches` (`/proc/PID/task/TID/status`), by thread id.
    package let voluntarySwitches: [String: Int]

    /// Voluntary context switches since `earlier`, over the threads alive in both samples.
    package func voluntarySwitches(since earlier: ProcessSample) -> Int {
        voluntarySwitches.reduce(0) { total, entry in
            guard let before = earlier.voluntarySwitches[entry.key] else { return total }
            return total + max(0, entry.value - before)
        }
    }

    package init?(pid: Int32) {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        // Fields after "(comm)": state is field 3, utime 14, stime 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let utime = Double(fields[11]), let stime = Double(fields[12]) else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        cpuTicksSeconds = (utime + stime) / max(ticks, 1)
        var nanoseconds = 0.0
        var switches: [String: Int] = [:]
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        for task in tasks {
            if let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/schedstat", encoding: .utf8),
               let first = text.split(separator: " ").first, let value = Double(first) {
                nanoseconds += value
            }
            if let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/status", encoding: .utf8),
               let value = Self.statusValue(text, "voluntary_ctxt_switches") {
                switches[task] = Int(value)
            }
        }
        cpuNanoseconds = nanoseconds
        voluntarySwitches = switches
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        peakRSSKilobytes = Self.statusValue(status, "VmHWM") ?? 0
        rssKilobytes = Self.statusValue(status, "VmRSS") ?? 0
        anonymousRSSKilobytes = Self.statusValue(status, "RssAnon") ?? 0
    }

    /// The number after `key:` in a `/proc/.../status` text (`VmHWM:\t  39244 kB`: 39244;
    /// `voluntary_ctxt_switches:\t337`: 337), or nil when the key is missing.
    static func statusValue(_ text: String, _ key: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(key + ":") {
            let fields = line.dropFirst(key.count + 1).split(whereSeparator: { $0 == " " || $0 == "\t" })
            return fields.first.flatMap { Double($0) }
        }
        return nil
    }
}

/// A datagram socket standing in for systemd's notification socket (`NOTIFY_SOCKET`); removed in `deinit`.
package final class NotifySocket {
    package let path: String
    private let fd: Int32

    /// - Throws: `EarshotError(.system)` when the socket cannot be created or bound.
    package init(path: String) throws(EarshotError) {
        self.path = path
        // `fd` is set last: a class whose stored properties are all set runs its deinit when its init throws, and
        // that would close the descriptor a second time (by then perhaps another thread's) and unlink `path`,
        // which may be another program's socket.
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw .posix(.system, "cannot create a notification socket", errno: errno) }
        guard var address = DaemonBenchmark.unixAddress(path) else {
            Glibc.close(descriptor)
            throw EarshotError(.system, "notification socket path \(path) is too long (set TMPDIR to a shorter directory)")
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else {
            let code = errno
            Glibc.close(descriptor)
            throw .posix(.system, "cannot bind the notification socket \(path)", errno: code)
        }
        fd = descriptor
    }

    /// The next datagram's text, or nil when none arrives within `timeoutMillis`.
    package func receive(timeoutMillis: Int32) -> String? {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, timeoutMillis) > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(fd, &buffer, buffer.count, 0)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }

    deinit {
        Glibc.close(fd)
        unlink(path)
    }
}


/// A child process started with `posix_spawn`: standard input and output on /dev/null, standard error into a file.
package final class ChildProcess {
    package let processIdentifier: pid_t
    private var exitStatus: Int32?

    /// Starts `executable`.
    /// - Throws: ``EarshotError`` `.unavailable` with `strerror` text when it cannot be started.
    package init(executable: String, arguments: [String], environment: [String: String], standardErrorPath: String) throws(EarshotError) {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, standardErrorPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid = pid_t()
        let status = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        guard status == 0 else {
            throw EarshotError(.unavailable, "cannot start \(executable): \(String(cString: strerror(status))) (build it with swift build -c release, or pass --daemon PATH)")
        }
        processIdentifier = pid
    }

    /// Whether the child has not exited yet (reaps it when it has).
    package var isRunning: Bool {
        guard exitStatus == nil else { return false }
        var status: Int32 = 0
        let result = waitpid(processIdentifier, &status, WNOHANG)
        guard result == processIdentifier else { return result == 0 }
        exitStatus = status
        return false
    }

    /// The exit status (128 + signal number when a signal ended it); 0 while it runs.
    package var terminationStatus: Int32 {
        guard let status = exitStatus else { return 0 }
        return status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
    }

    /// Waits for the child to exit.
    package func waitUntilExit() {
        while exitStatus == nil {
            var status: Int32 = 0
            let result = waitpid(processIdentifier, &status, 0)
            if result == processIdentifier { exitStatus = status } else if errno != EINTR { return }
        }
    }
}
