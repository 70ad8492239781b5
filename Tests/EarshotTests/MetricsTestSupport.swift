import Foundation
import Testing
import EarshotSupport

/// One HTTP/1.0 request over a real TCP connection to 127.0.0.1 (no client library: the test speaks the protocol).
enum HTTPGet {
    struct Response {
        var status: Int
        var headers: [String: String]
        var body: String
    }

    /// `METHOD path` to 127.0.0.1:`port`; nil when the connection is refused or nothing comes back within 10 s.
    /// Connects the TCP socket `descriptor` to 127.0.0.1:`port`; false when connect(2) fails (errno says why).
    static func connectToLoopback(_ descriptor: Int32, port: Int) -> Bool {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    static func fetch(port: Int, path: String = "/metrics", method: String = "GET") -> Response? {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard connectToLoopback(descriptor, port: port) else { return nil }
        let request = Array("\(method) \(path) HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count else { return nil }
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            received += chunk[0..<count]
        }
        let text = String(decoding: received, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { return nil }
        let head = text[..<split.lowerBound].components(separatedBy: "\r\n")
        guard let statusLine = head.first, statusLine.hasPrefix("HTTP/1."),
              let status = Int(statusLine.split(separator: " ").dropFirst().first ?? "") else { return nil }
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Response(status: status, headers: headers, body: String(text[split.upperBound...]))
    }

    /// The sample lines (no comments) of an exposition, by series (`name{labels}`): value text.
    static func samples(_ exposition: String) -> [String: String] {
        var result: [String: String] = [:]
        for line in exposition.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " ") else { continue }
            result[String(line[..<space])] = String(line[line.index(after: space)...])
        }
        return result
    }
}

/// Prometheus' `promtool check metrics` (Debian `prometheus`): reads an exposition on standard input.
enum Promtool {
    static let path = "/usr/bin/promtool"
    static var available: Bool { FileManager.default.isExecutableFile(atPath: path) }

    /// Exit status and everything it printed for `text`.
    static func check(_ text: String) throws -> (status: Int32, output: String) {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-metrics-\(UUID().uuidString).txt")
        try text.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let outcome = try EarshotCLI.runProcess(
            URL(fileURLWithPath: "/bin/sh"), ["-c", "\(path) check metrics < '\(file.path)' 2>&1"], timeout: 60)
        return (outcome.status, outcome.standardOutput)
    }
}

extension Trait where Self == ConditionTrait {
    /// Skips a test when promtool is not installed (Debian `prometheus`; `.ci/run` installs it).
    static var needsPromtool: Self {
        .enabled(if: Promtool.available, "promtool is not installed (apt-get install prometheus)")
    }
}

/// Raw S16_LE mono audio for `earshotd --input -` (16 kHz) and WAV files for `earshot detect`.
enum SyntheticAudio {
    /// `seconds` of digital silence at 16 kHz.
    static func silence(seconds: Double) -> [Float] { [Float](repeating: 0, count: Int(seconds * 16_000)) }

    /// `seconds` of a sine of `amplitude` (full scale 1) at `hertz`, 16 kHz.
    static func sine(seconds: Double, hertz: Double = 1_000, amplitude: Double) -> [Float] {
        (0..<Int(seconds * 16_000)).map { Float(amplitude * sin(2 * Double.pi * hertz * Double($0) / 16_000)) }
    }

    static func int16(_ sample: Float) -> Int16 { Int16(max(-32_768, min(32_767, (sample * 32_768).rounded()))) }

    /// S16_LE bytes.
    static func pcm(_ samples: [Float]) -> Data {
        var data = Data(capacity: samples.count * 2)
        for sample in samples { withUnsafeBytes(of: int16(sample).littleEndian) { data.append(contentsOf: $0) } }
        return data
    }

    /// A 16-bit mono 16 kHz WAV file of `samples`.
    static func writeWAV(_ samples: [Float], to url: URL) throws {
        let body = pcm(samples)
        var data = Data()
        func append32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { data.append(contentsOf: $0) } }
        func append16(_ value: UInt16) { withUnsafeBytes(of: value.littleEndian) { data.append(contentsOf: $0) } }
        data.append(contentsOf: Array("RIFF".utf8)); append32(UInt32(36 + body.count)); data.append(contentsOf: Array("WAVE".utf8))
        data.append(contentsOf: Array("fmt ".utf8)); append32(16); append16(1); append16(1); append32(16_000); append32(32_000)
        append16(2); append16(16)
        data.append(contentsOf: Array("data".utf8)); append32(UInt32(body.count))
        data.append(body)
        try data.write(to: url)
    }
}

/// A temp directory with an `earshotd` configuration: a socket there, no journal, no history, `extra` lines after.
struct DaemonScratch {
    let directory: URL
    let config: URL
    let socket: String

    init(_ extra: [String]) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-m-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        socket = directory.appendingPathComponent("e.sock").path
        config = directory.appendingPathComponent("earshotd.conf")
        let lines = ["[output]", "socket = \(socket)", "journal = false", "[history]", "enabled = false"] + extra
        try (lines.joined(separator: "\n") + "\n").write(to: config, atomically: true, encoding: .utf8)
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }
}
