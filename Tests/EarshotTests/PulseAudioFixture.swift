import Foundation
import Testing
import EarshotTools

/// A real clocked capture device for tests: a PulseAudio server of the test's own (Debian `pulseaudio`) with one
/// null sink, whose monitor source is captured through ALSA's `pulse` PCM plugin (Debian `libasound2-plugins`).
/// `paplay` (Debian `pulseaudio-utils`) plays recordings into the sink; the monitor delivers them at the server's
/// clock, in real time, and silence between them. Killing the server (SIGKILL) makes the device vanish mid-capture;
/// ``start()`` brings it back on the same socket.
///
/// Everything lives in a temp directory: HOME (so no user configuration or cookie is read), PULSE_RUNTIME_PATH,
/// the server's own start-up script (`-n -F`: no system default.pa) and its native-protocol socket. The server runs
/// as a user daemon even as root (`--system=false`; it warns and runs). Children are stopped with SIGKILL (test
/// children inherit a blocked SIGTERM from the runner).
///
/// The server and the players are started with `posix_spawn` (``ChildProcess``), not Foundation's `Process`:
/// pulseaudio closes every inherited descriptor at start, which Foundation takes for the child's exit; it then
/// blocks in `waitpid` on the live server, and no other `Process` of the test (the daemon) is seen to exit.
final class PulseAudioServer: @unchecked Sendable {
    static let executable = "/usr/bin/pulseaudio"
    static let player = "/usr/bin/paplay"
    /// The ALSA `pulse` PCM plugin, where Debian installs it (any architecture).
    static var alsaPluginInstalled: Bool {
        let libraries = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib")) ?? []
        let candidates = ["/usr/lib/alsa-lib"] + libraries.map { "/usr/lib/\($0)/alsa-lib" }
        return candidates.contains { FileManager.default.fileExists(atPath: "\($0)/libasound_module_pcm_pulse.so") }
    }
    static var available: Bool {
        FileManager.default.isExecutableFile(atPath: executable) && FileManager.default.isExecutableFile(atPath: player)
            && alsaPluginInstalled
    }
    static let missingMessage =
        "PulseAudio or the ALSA pulse plugin is not installed (apt-get install pulseaudio pulseaudio-utils libasound2-plugins)"

    /// The null sink's name; its monitor source is `<sinkName>.monitor`.
    let sinkName = "earshot_null"
    let directory: URL
    var socketPath: String { directory.appendingPathComponent("native").path }
    var serverAddress: String { "unix:\(socketPath)" }
    private var home: URL { directory.appendingPathComponent("home") }
    private var runtime: URL { directory.appendingPathComponent("runtime") }
    private var script: URL { directory.appendingPathComponent("server.pa") }
    private var logFile: URL { directory.appendingPathComponent("pulseaudio.log") }
    private var process: ChildProcess?
    private var players: [ChildProcess] = []

    init() throws {
        // Short: the socket path must fit a Unix socket address (107 bytes).
        directory = URL(fileURLWithPath: "/tmp/earshot-pa-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        for url in [home, runtime] { try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true) }
        // 16 kHz mono, the rate the daemon asks for, so the server does not resample what the test plays.
        let text = """
            load-module module-native-protocol-unix socket=\(socketPath) auth-anonymous=1
            load-module module-null-sink sink_name=\(sinkName) rate=16000 channels=1 format=s16le
            set-default-sink \(sinkName)
            set-default-source \(sinkName).monitor

            """
        try text.write(to: script, atomically: true, encoding: .utf8)
    }

    /// ALSA configuration text defining `pcm.NAME` as the null sink's monitor on this server.
    func alsaPCM(_ name: String) -> String {
        """
        pcm.\(name) {
            type pulse
            server "\(serverAddress)"
            device "\(sinkName).monitor"
        }

        """
    }

    /// Where an earshotd capturing from this server runs: `daemon/` under this fixture's directory, with a HOME
    /// (for its `.asoundrc`), a STATE_DIRECTORY (its history) and a runtime directory (XDG_RUNTIME_DIR: without one,
    /// libpulse in ALSA's pulse plugin makes `/tmp/pulse-XXXXXXXXXXXX` for it, which stays after the test); its
    /// environment has none of the systemd or PulseAudio variables of the test's own.
    struct DaemonSandbox {
        let directory: URL
        let home: URL
        let state: URL
        var environment: [String: String]
    }

    func daemonSandbox() throws -> DaemonSandbox {
        let directory = self.directory.appendingPathComponent("daemon")
        let home = directory.appendingPathComponent("home")
        let state = directory.appendingPathComponent("state")
        let runtime = directory.appendingPathComponent("runtime")
        for url in [home, state] { try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true) }
        try FileManager.default.createDirectory(at: runtime, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var environment = ProcessInfo.processInfo.environment
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "PULSE_SERVER"] { environment[name] = nil }
        environment["HOME"] = home.path
        environment["STATE_DIRECTORY"] = state.path
        environment["XDG_RUNTIME_DIR"] = runtime.path
        return DaemonSandbox(directory: directory, home: home, state: state, environment: environment)
    }

    /// The environment for the server and its clients: this fixture's HOME, runtime directory and server.
    var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = home.path
        environment["PULSE_RUNTIME_PATH"] = runtime.path
        environment["XDG_RUNTIME_DIR"] = runtime.path
        environment["PULSE_SERVER"] = serverAddress
        environment["DBUS_SESSION_BUS_ADDRESS"] = "disabled:"
        return environment
    }

    struct Failure: Error, CustomStringConvertible { let description: String }

    /// Starts the server and waits (up to 10 s) until its socket accepts connections. Returns when it does.
    func start() throws {
        // LD_BIND_NOW set: pulseaudio would otherwise re-execute itself to set it (for its real-time threads).
        var serverEnvironment = environment
        serverEnvironment["LD_BIND_NOW"] = "1"
        let process = try ChildProcess(
            executable: Self.executable,
            arguments: [
                "-n", "--daemonize=no", "--exit-idle-time=-1", "--system=false", "--use-pid-file=no",
                "--disable-shm=yes", "--log-target=stderr", "--log-level=warning", "-F", script.path,
            ],
            environment: serverEnvironment, standardErrorPath: logFile.path)
        self.process = process
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if !process.isRunning { break }
            if Self.accepts(socketPath) { return }
            usleep(10_000)
        }
        let text = (try? String(contentsOf: logFile, encoding: .utf8)) ?? ""
        kill()
        throw Failure(description: "PulseAudio did not open \(socketPath) within 10 s: \(text)")
    }

    /// SIGKILL: the server vanishes at once, as a crashed or killed sound server does. Its players die with it.
    func kill() {
        guard let process else { return }
        if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        self.process = nil
    }

    var isRunning: Bool { process?.isRunning ?? false }

    /// Plays `file` into the null sink with `paplay` (in the background; it ends with the file or the server).
    func play(_ file: URL) throws {
        let player = try ChildProcess(
            executable: Self.player, arguments: ["--device=\(sinkName)", file.path], environment: environment,
            standardErrorPath: directory.appendingPathComponent("paplay-\(players.count).log").path)
        players.append(player)
    }

    /// Kills the players and the server and removes the directory.
    func remove() {
        for player in players {
            if player.isRunning { Glibc.kill(player.processIdentifier, SIGKILL) }
            player.waitUntilExit()
        }
        players = []
        kill()
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { remove() }

    /// True when a stream socket at `path` accepts a connection.
    static func accepts(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in bytes.enumerated() { raw[i] = byte }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        return connected == 0
    }
}

extension Trait where Self == ConditionTrait {
    /// Skips a test when PulseAudio, paplay or ALSA's pulse plugin is missing (`.ci/run` installs them).
    static var needsPulseAudio: Self {
        .enabled(if: PulseAudioServer.available, Comment(rawValue: PulseAudioServer.missingMessage))
    }
}
