import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// A fresh directory under /tmp (short, so socket paths stay far below the 107-byte limit), removed on deinit.
final class TemporarySocketDirectory {
    let path: String

    init() throws {
        var template = Array("/tmp/earshot-test-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw EarshotError.posix(.cannotCreate, "cannot create a temporary directory", errno: errno)
        }
        path = String(cString: made)
    }

    func file(_ name: String) -> String { path + "/" + name }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }
}

enum SocketTestSupport {
    /// Generous: nothing in these tests should take more than a few milliseconds.
    static let timeout = 10.0

    /// The status closure the tests give the server: fixed fields, like the daemon's.
    static let status: EventServer.StatusProvider = {
        ["uptime_seconds": .number(12.5, decimals: 1), "device": "hw:1,0", "xruns": 3, "windows_analysed": 1234]
    }

    static func server(
        _ path: String, clientQueueLimitBytes: Int = 256 * 1024, maxRequestLineBytes: Int = 64 * 1024,
        maxClients: Int = 64, knownGroups: [String]? = nil
    ) throws -> EventServer {
        try EventServer(
            configuration: .init(
                path: path, clientQueueLimitBytes: clientQueueLimitBytes, maxRequestLineBytes: maxRequestLineBytes,
                maxClients: maxClients, knownGroups: knownGroups),
            status: status)
    }

    /// Connects and waits for the reply to a subscribe request, so the server has surely accepted the client
    /// before anything is published.
    static func subscriber(_ path: String, groups: [String] = []) throws -> EventSubscriber {
        let client = try EventSubscriber(path: path)
        try client.subscribe(groups: groups)
        let reply = try client.readLine(timeoutSeconds: timeout)
        guard case .line(let line) = reply, line.hasPrefix("{\"type\":\"subscribed\"") else {
            throw EarshotError(.io, "no subscribe reply: \(reply)")
        }
        return client
    }

    /// Reads `count` lines, failing the test on a timeout or the end of the stream.
    static func lines(_ client: EventSubscriber, _ count: Int) throws -> [String] {
        var lines: [String] = []
        while lines.count < count {
            let result = try client.readLine(timeoutSeconds: timeout)
            guard case .line(let line) = result else {
                Issue.record("expected line \(lines.count + 1) of \(count), got \(result)")
                return lines
            }
            lines.append(line)
        }
        return lines
    }

    /// Polls `condition` every millisecond until it holds or `timeout` passes.
    static func eventually(_ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return true }
            usleep(1000)
        }
        return condition()
    }

    static let wallClock = Date(timeIntervalSince1970: 1_796_057_112.3455)  // 2026-11-30T16:45:12.345Z

    static func onset(_ group: String, _ label: String, _ confidence: Float, _ start: Double) -> DetectionEvent {
        .onset(.init(group: group, classLabel: label, confidence: confidence, start: start, decisionTime: start + 1.44))
    }

    static func offset(_ group: String, _ label: String, _ start: Double, _ end: Double) -> DetectionEvent {
        .offset(.init(
            group: group, classLabel: label, start: start, end: end, peakConfidence: 0.91, meanConfidence: 0.72,
            positiveWindows: 11, reason: .holdElapsed))
    }

    static func line(_ event: DetectionEvent) -> String { EventJSON.object(for: event, time: wallClock).encoded }

    /// A socket file nobody listens on, as a crashed daemon leaves it.
    static func makeStaleSocket(at path: String) throws {
        let address = try UnixSocketAddress(path: path)
        let fd = SocketCall.makeStreamSocket(nonBlocking: false)
        defer { SocketCall.close(fd) }
        guard fd >= 0, address.withSockaddr({ bind(fd, $0, $1) }) == 0 else {
            throw EarshotError.posix(.system, "cannot bind \(path)", errno: errno)
        }
    }
}

extension EventSubscriber {
    /// The next line that is not a health event, or nil on a timeout or a closed socket. A new client receives every
    /// event until its subscription is answered, so a daemon's `capture_live` may come before the reply to a request.
    func nextReply(timeoutSeconds: Double) throws -> String? {
        try nextLine(timeoutSeconds: timeoutSeconds) { !$0.hasPrefix(#"{"type":"health""#) }
    }
}
