import Foundation
import Glibc
import Synchronization
import Testing
import EarshotSupport
import EarshotOutputs
import EarshotTools

/// A Unix socket server that plays a script to the one client it accepts: lines to send, lines to read (recorded),
/// then it closes. Stands in for earshotd where a test needs lines the daemon sends only in rare moments (an error
/// notice before a reply, another group's event before `subscribed`).
final class ScriptedSocketServer: @unchecked Sendable {
    enum Step: Sendable {
        case send(String)
        /// Reads one request line (recorded in ``received``).
        case read
    }

    let path: String
    private let listener: Int32
    private let lines = Mutex<[String]>([])
    private let finished = DispatchSemaphore(value: 0)

    init(path: String, script: [Step]) throws {
        self.path = path
        let address = try UnixSocketAddress(path: path)
        listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let bound = address.withSockaddr { pointer, length in bind(listener, pointer, length) }
        guard listener >= 0, bound == 0, listen(listener, 4) == 0 else {
            throw EarshotError.posix(.io, "cannot listen on \(path)", errno: errno)
        }
        Thread.detachNewThread { [self] in
            defer { finished.signal() }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            defer { close(client) }
            var pending = [UInt8]()
            for step in script {
                switch step {
                case .send(let line):
                    let bytes = Array((line + "\n").utf8)
                    _ = bytes.withUnsafeBytes { Glibc.send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                case .read:
                    var chunk = [UInt8](repeating: 0, count: 4096)
                    while !pending.contains(10) {
                        var poller = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
                        guard poll(&poller, 1, 10_000) > 0 else { return }
                        let count = recv(client, &chunk, chunk.count, 0)
                        guard count > 0 else { return }
                        pending += chunk[0..<count]
                    }
                    let newline = pending.firstIndex(of: 10)!
                    let line = String(decoding: pending[..<newline], as: UTF8.self)
                    pending.removeSubrange(...newline)
                    lines.withLock { $0.append(line) }
                }
            }
            // Lets the client read what was sent before the close.
            usleep(100_000)
        }
    }

    /// The request lines read.
    var received: [String] { lines.withLock { $0 } }

    /// Waits (at most 10 s) for the script to end, then closes the listener.
    func finish() {
        _ = finished.wait(timeout: .now() + 10)
        close(listener)
    }
}

/// Audit 13 F8: the command line takes an error line as the answer to its request only when it answers it (the
/// daemon echoes the request's `"id"`), and `earshot subscribe --group` prints only its groups' events, those sent
/// before the daemon had the filter included. Real `earshot` processes against a real Unix socket.
@Suite("CLI: answers, notices and the subscribe filter on the socket", .serialized)
struct CLIReplyTests {
    static let notice = #"{"type":"error","message":"the daemon no longer watches group \"glass_break\" after a reload: this subscription gets no events of it"}"#
    static let health = #"{"type":"health","state":"capture_live","message":"capturing","time":"2026-12-07T10:00:00.000Z"}"#

    static func run(_ script: [ScriptedSocketServer.Step], _ arguments: [String]) throws -> (EarshotCLI.Outcome, [String]) {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try ScriptedSocketServer(path: path, script: script)
        let outcome = try #require(try EarshotCLI.run(arguments + ["--socket", path], in: URL(fileURLWithPath: directory.path), timeout: 30))
        server.finish()
        return (outcome, server.received)
    }

    @Test("earshot status: an error notice (no id) before the reply is not the answer; the reply with the request's id is (exit 0)",
          .needsEarshotBuilt)
    func statusAfterNotice() throws {
        let reply = #"{"type":"status","id":1,"uptime":12.5,"capture":"live","watch":["smoke_alarm"],"time":"2026-12-07T10:00:00.000Z"}"#
        let (outcome, received) = try Self.run([.send(Self.notice), .send(Self.health), .read, .send(reply)], ["status", "--json"])
        #expect(received == [#"{"cmd":"status","id":1}"#])
        #expect(outcome.status == 0, "\(outcome.standardError)")
        #expect(outcome.standardOutput == reply + "\n")
        #expect(outcome.standardError.isEmpty)
    }

    @Test("earshot test-alert: a notice that reads like a refusal is not the answer (before: exit 75); the error with the request's id is (exit 75)",
          .needsEarshotBuilt)
    func testAlertAnswerOnly() throws {
        let refusalNotice = #"{"type":"error","message":"test alert refused: not an answer"}"#
        let sent = #"{"type":"test_alert_sent","id":1,"time":"2026-12-07T10:00:00.000Z","node":"kitchen","outputs":["socket"]}"#
        let (ok, received) = try Self.run([.send(refusalNotice), .read, .send(sent)], ["test-alert", "--json"])
        #expect(received == [#"{"cmd":"test","id":1}"#])
        #expect(ok.status == 0, "\(ok.standardError)")
        #expect(ok.standardOutput == sent + "\n")

        let refused = #"{"type":"error","id":1,"message":"test alert refused: one was sent 3 s ago; at most one per 10 s (try again in 7 s)"}"#
        let (no, _) = try Self.run([.send(Self.notice), .read, .send(refused)], ["test-alert"])
        #expect(no.status == 75)
        #expect(no.standardError == "earshot: test alert refused: one was sent 3 s ago; at most one per 10 s (try again in 7 s)\n")
    }

    @Test("earshot sleep status: a connection refused with an error line and closed: that line is the reason, exit 69", .needsEarshotBuilt)
    func refusedConnection() throws {
        let refusal = #"{"type":"error","message":"too many subscribers (64 connected, at most 64); try again later, or raise [output] max_clients"}"#
        let (outcome, _) = try Self.run([.send(refusal)], ["sleep", "status"])
        #expect(outcome.status == 69)
        #expect(outcome.standardError == "earshot: too many subscribers (64 connected, at most 64); try again later, or raise [output] max_clients\n")
    }

    @Test("earshot subscribe --group baby_cry: another group's event sent before the subscribed reply is not printed; a notice goes to stderr, not exit 64",
          .needsEarshotBuilt)
    func subscribeFiltersUntilSubscribed() throws {
        let smoke = #"{"type":"detection","group":"smoke_alarm","class":"Smoke detector, smoke alarm","confidence":0.8,"stream_time":1.0,"time":"2026-12-07T10:00:00.000Z"}"#
        let cry = #"{"type":"detection","group":"baby_cry","class":"Baby cry, infant cry","confidence":0.97,"stream_time":2.0,"time":"2026-12-07T10:00:01.000Z"}"#
        let cryEnd = #"{"type":"detection_end","group":"baby_cry","class":"Baby cry, infant cry","start":2.0,"end":5.0,"duration":3.0,"peak_confidence":0.99,"mean_confidence":0.97,"windows":5,"reason":"hold_elapsed","time":"2026-12-07T10:00:04.000Z"}"#
        let (outcome, received) = try Self.run([
            .send(smoke), .send(Self.health), .send(cry), .send(Self.notice), .read,
            .send(#"{"type":"subscribed","id":1,"groups":["baby_cry"]}"#), .send(cryEnd), .send(#"{"type":"shutdown"}"#),
        ], ["subscribe", "--group", "baby_cry"])
        #expect(received == [#"{"subscribe":["baby_cry"],"id":1}"#])
        #expect(outcome.status == 0, "\(outcome.standardError)")
        #expect(outcome.outputLines == [Self.health, cry, cryEnd, #"{"type":"shutdown"}"#])
        #expect(outcome.errorLines.count == 1)
        #expect(outcome.errorLines.first?.hasPrefix("earshot: ") == true && outcome.errorLines.first?.contains("glass_break") == true, "\(outcome.standardError)")

        // The daemon's refusal of the filter answers the request (its id): exit 64 with its reason.
        let refusal = #"{"type":"error","id":1,"message":"unknown group \"nosuch\" in subscribe (watched groups: baby_cry)"}"#
        let (refused, _) = try Self.run([.send(smoke), .read, .send(refusal)], ["subscribe", "--group", "nosuch"])
        #expect(refused.status == 64)
        #expect(refused.outputLines.isEmpty)
        #expect(refused.standardError == "earshot: unknown group \"nosuch\" in subscribe (watched groups: baby_cry)\n")
    }

    @Test("earshotd's socket echoes a request's id right after type, in replies and error replies; notices carry none; a bad id is refused")
    func daemonEchoesID() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try SocketTestSupport.server(path, knownGroups: ["smoke_alarm", "baby_cry"])
        defer { server.stop() }
        let client = try EventSubscriber(path: path)
        try client.send(line: #"{"subscribe":["baby_cry"],"id":"a-1"}"#)
        try client.send(line: #"{"subscribe":["nosuch"],"id":7}"#)
        try client.send(line: #"{"cmd":"reboot","id":8}"#)
        try client.send(line: #"{"status":true,"id":[1]}"#)
        try client.send(line: #"{"status":true,"id":""}"#)
        try client.send(line: #"{"cmd":"listen"}"#)
        try client.send(line: #"{"status":true,"id":9}"#)
        let lines = try SocketTestSupport.lines(client, 7)
        #expect(lines[0] == #"{"type":"subscribed","id":"a-1","groups":["baby_cry"]}"#)
        #expect(lines[1].hasPrefix(#"{"type":"error","id":7,"message":"unknown group \"nosuch\" in subscribe"#), "\(lines[1])")
        #expect(lines[2] == #"{"type":"error","id":8,"message":"unknown command \"reboot\" (supported: \"status\", \"listen\")"}"#)
        let badID = #"{"type":"error","message":"malformed request: \"id\" must be a string of 1 to 64 bytes or an integer (the reply carries it back)"}"#
        #expect(lines[3] == badID)
        #expect(lines[4] == badID)
        #expect(lines[5] == #"{"type":"listening"}"#)
        #expect(lines[6].hasPrefix(#"{"type":"status","id":9,"uptime_seconds":12.5,"#), "\(lines[6])")
        // A reload's notice to this client's filter: no id.
        server.setKnownGroups(["smoke_alarm"])
        let notice = try SocketTestSupport.lines(client, 1)
        #expect(notice == [#"{"type":"error","message":"the daemon no longer watches group \"baby_cry\" after a reload: this subscription gets no events of it"}"#])

        #expect(EventRequest.parseLine(Array(#"{"cmd":"status","id":3}"#.utf8)).parsed == .request(.status))
        #expect(EventRequest.parseLine(Array(#"{"cmd":"status","id":3}"#.utf8)).id == .int(3))
        #expect(EventRequest.parseLine(Array(#"{"cmd":"status"}"#.utf8)).id == nil)
        #expect(EventRequest.parseLine(Array(("{\"status\":true,\"id\":\"" + String(repeating: "x", count: 65) + "\"}").utf8)).id == nil)
    }
}
