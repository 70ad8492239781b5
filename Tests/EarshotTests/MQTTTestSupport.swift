import Foundation
import Testing
import Glibc

/// A real `mosquitto` broker of the test's own, on 127.0.0.1 and a free port, with a config file in a temp directory.
final class MosquittoBroker: @unchecked Sendable {
    static let executable = "/usr/sbin/mosquitto"
    static var available: Bool {
        FileManager.default.isExecutableFile(atPath: executable)
            && FileManager.default.isExecutableFile(atPath: MQTTSubscriber.executable)
    }

    let port: Int
    let directory: URL
    private var process: Process?
    private let log: URL

    /// - Parameter extraLines: listener options (e.g. `password_file ...`, TLS files) after the `listener` line.
    init(extraLines: [String] = ["allow_anonymous true"], persistence: Bool = false) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-broker-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        port = try FreePort.pick()
        log = directory.appendingPathComponent("broker.log")
        var lines = ["listener \(port) 127.0.0.1"] + extraLines
        if persistence {
            lines += ["persistence true", "persistence_location \(directory.path)/", "autosave_interval 1"]
        } else {
            lines += ["persistence false"]
        }
        try (lines.joined(separator: "\n") + "\n").write(to: directory.appendingPathComponent("broker.conf"), atomically: true, encoding: .utf8)
        try start()
    }

    func start() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        process.arguments = ["-c", directory.appendingPathComponent("broker.conf").path]
        FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        self.process = process
        guard TestWait.until(seconds: 10, { FreePort.accepts(port) }) else {
            throw BrokerError(message: "mosquitto did not listen on 127.0.0.1:\(port): \(logText)")
        }
    }

    var logText: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

    func signal(_ number: Int32) {
        if let process, process.isRunning { kill(process.processIdentifier, number) }
    }

    /// SIGKILL and wait. (Not SIGTERM: a child inherits the test process's signal mask, and a test that blocked
    /// SIGTERM for the daemon's signal handling leaves it blocked in every process started later. Persistence, when
    /// on, is saved every second.)
    func stop() {
        guard let process, process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    deinit {
        signal(SIGCONT)
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    struct BrokerError: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }
}

enum FreePort {
    /// A TCP port on 127.0.0.1 that nothing listens on (bound to port 0, read, closed).
    static func pick() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        guard let port = bindLoopback(descriptor) else {
            throw MosquittoBroker.BrokerError(message: "no free port: \(String(cString: strerror(errno)))")
        }
        return port
    }

    /// Binds `descriptor` (a TCP socket) to 127.0.0.1 on a port the kernel picks and returns that port; nil when
    /// bind(2) or getsockname(2) fails (errno says why).
    /// With `port`, that port (a test that starts a server where nothing listened before).
    static func bindLoopback(_ descriptor: Int32, port: Int = 0) -> Int? {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0 }
        }
        return bound ? Int(UInt16(bigEndian: address.sin_port)) : nil
    }

    static func accepts(_ port: Int) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}

/// A real subscriber: `mosquitto_sub` on `#`, each message as `RETAIN<TAB>TOPIC<TAB>PAYLOAD` with its arrival time.
final class MQTTSubscriber: @unchecked Sendable {
    static let executable = "/usr/bin/mosquitto_sub"

    struct Message: Sendable {
        var retained: Bool
        var topic: String
        var payload: String
        var arrival: Date
        var json: [String: Any]? {
            (try? JSONSerialization.jsonObject(with: Data(payload.utf8))) as? [String: Any]
        }
    }

    private let process = Process()
    private let lock = NSLock()
    private var buffer = Data()
    private var received: [Message] = []

    /// - Parameter session: a client id for a persistent session (QoS 1 messages kept while it is away, with a
    ///   broker that persists), or nil for a clean one.
    init(port: Int, topic: String = "#", session: String? = nil, extra: [String] = []) throws {
        process.executableURL = URL(fileURLWithPath: Self.executable)
        var arguments = ["-h", "127.0.0.1", "-p", String(port), "-t", topic, "-q", "1", "-F", "%r\t%t\t%p"]
        if let session { arguments += ["-c", "-i", session] }
        process.arguments = arguments + extra
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        pipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            guard let self, !data.isEmpty else { return }
            self.take(data)
        }
        try process.run()
    }

    private func take(_ data: Data) {
        lock.lock()
        defer { lock.unlock() }
        buffer.append(data)
        while let newline = buffer.firstIndex(of: 0x0A) {
            let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
            buffer.removeSubrange(buffer.startIndex...newline)
            let parts = line.split(separator: "\t", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
            guard parts.count >= 2 else { continue }
            received.append(Message(retained: parts[0] == "1", topic: parts[1], payload: parts.count > 2 ? parts[2] : "", arrival: Date()))
        }
    }

    var messages: [Message] {
        lock.lock()
        defer { lock.unlock() }
        return received
    }

    func messages(on topic: String) -> [Message] { messages.filter { $0.topic == topic } }

    @discardableResult
    func waitFor(seconds: Double, _ condition: ([Message]) -> Bool) -> Bool {
        TestWait.until(seconds: seconds) { condition(messages) }
    }

    /// SIGKILL (see ``MosquittoBroker/stop()``) and wait.
    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    deinit { stop() }
}

/// Publishes with `mosquitto_pub` (one message, or `-l`: one message per line of `lines`).
enum MQTTPublish {
    static func send(port: Int, topic: String, payload: String, retain: Bool = false) throws {
        var arguments = ["-h", "127.0.0.1", "-p", String(port), "-t", topic, "-m", payload, "-q", "1"]
        if retain { arguments.append("-r") }
        let outcome = try EarshotCLI.runProcess(URL(fileURLWithPath: "/usr/bin/mosquitto_pub"), arguments, timeout: 20)
        guard outcome.status == 0 else { throw MosquittoBroker.BrokerError(message: "mosquitto_pub: \(outcome.standardError)") }
    }

    static func lines(port: Int, topic: String, _ lines: [String]) throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-pub-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: file) }
        try (lines.joined(separator: "\n") + "\n").write(to: file, atomically: true, encoding: .utf8)
        let script = "/usr/bin/mosquitto_pub -h 127.0.0.1 -p \(port) -q 1 -t '\(topic)' -l < '\(file.path)'"
        let outcome = try EarshotCLI.runProcess(URL(fileURLWithPath: "/bin/sh"), ["-c", script], timeout: 60)
        guard outcome.status == 0 else { throw MosquittoBroker.BrokerError(message: "mosquitto_pub -l: \(outcome.standardError)") }
    }
}

/// `earshotd` running in the background, its standard output (JSON lines) and error collected as they come.
final class DaemonProcess: @unchecked Sendable {
    let process = Process()
    private let lock = NSLock()
    private var outputData = Data()
    private var errorData = Data()
    private var outputLines: [(line: String, arrival: Date)] = []
    let input = Pipe()

    /// - Parameter program: the executable (default `earshotd`; `EarshotCLI.executable` runs `earshot`, e.g.
    ///   `earshot listen`, collected the same way).
    init(_ arguments: [String], environment: [String: String]? = nil, standardInput: Bool = false,
         program: URL? = EarshotdRun.executable) throws {
        guard let executable = program else { throw MosquittoBroker.BrokerError(message: "earshotd is not built") }
        process.executableURL = executable
        process.arguments = arguments
        if let environment { process.environment = environment }
        process.currentDirectoryURL = TestPaths.packageRoot
        let output = Pipe(), error = Pipe()
        process.standardOutput = output
        process.standardError = error
        process.standardInput = standardInput ? input : FileHandle.nullDevice
        output.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            guard let self, !data.isEmpty else { return }
            self.lock.lock()
            self.outputData.append(data)
            while let newline = self.outputData.firstIndex(of: 0x0A) {
                let line = String(decoding: self.outputData[self.outputData.startIndex..<newline], as: UTF8.self)
                self.outputData.removeSubrange(self.outputData.startIndex...newline)
                self.outputLines.append((line, Date()))
            }
            self.lock.unlock()
        }
        error.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            guard let self, !data.isEmpty else { return }
            self.lock.lock()
            self.errorData.append(data)
            self.lock.unlock()
        }
        try process.run()
    }

    var lines: [(line: String, arrival: Date)] {
        lock.lock()
        defer { lock.unlock() }
        return outputLines
    }

    /// The JSON objects of standard output.
    var objects: [[String: Any]] {
        lines.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.line.utf8))) as? [String: Any] }
    }

    var errorText: String {
        lock.lock()
        defer { lock.unlock() }
        return String(decoding: errorData, as: UTF8.self)
    }

    /// Waits for the process to end (killing it after `seconds`); its status.
    @discardableResult
    func wait(seconds: Double) -> Int32 {
        if !TestWait.until(seconds: seconds, { !process.isRunning }) {
            kill(process.processIdentifier, SIGKILL)
        }
        process.waitUntilExit()
        Thread.sleep(forTimeInterval: 0.1)  // the last readability callbacks
        return process.terminationStatus
    }

    func signal(_ number: Int32) {
        if process.isRunning { kill(process.processIdentifier, number) }
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

extension Trait where Self == ConditionTrait {
    /// Skips a test when the `mosquitto` broker and its clients are not installed (Debian `mosquitto`,
    /// `mosquitto-clients`; `.ci/run` installs them).
    static var needsMosquitto: Self {
        .enabled(if: MosquittoBroker.available, "mosquitto and mosquitto-clients are not installed (apt-get install mosquitto mosquitto-clients)")
    }
}

/// A temp directory with an `earshotd` configuration publishing to `port` as `node`.
struct MQTTDaemonSetup {
    let directory: URL
    let config: URL
    let socket: String

    init(port: Int, node: String, extraMQTT: [String] = [], keepalive: Int = 5, watch: String? = nil) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-mqtt-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        socket = directory.appendingPathComponent("e.sock").path
        config = directory.appendingPathComponent("earshotd.conf")
        var lines = ["[output]", "socket = \(socket)", "journal = false", "[history]", "enabled = false"]
        if let watch { lines += ["[detection]", "watch = \(watch)"] }
        lines += ["[mqtt]", "enabled = true", "host = 127.0.0.1", "port = \(port)", "node = \(node)", "keepalive = \(keepalive)"] + extraMQTT
        try (lines.joined(separator: "\n") + "\n").write(to: config, atomically: true, encoding: .utf8)
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }
}
