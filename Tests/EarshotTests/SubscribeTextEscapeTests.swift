import Foundation
import Testing
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotTools

/// `earshot subscribe --format text` writes what the socket sends to a terminal: control characters in it (a class
/// name, a health message) must not reach the terminal as they are (trial 13 D11).
@Suite("earshot subscribe --format text: control characters from the socket escaped")
struct SubscribeTextEscapeTests {
    typealias S = SocketTestSupport

    /// An OSC title change, a colour and an erase-line, as a hostile socket could put in a class name.
    static let hostileClass = "\u{1B}]0;PWNED\u{07}\u{1B}[31mRED\u{1B}[2K"
    /// A cursor move, then a carriage return and a forged line of the daemon.
    static let hostileMessage = "x\u{1B}[1Ahidden\r\nearshotd: fake line"

    @Test("the text form shows control characters as \\xNN and keeps the rest")
    func textFormEscapes() throws {
        let utc = try #require(TimeZone(identifier: "UTC"))
        let onset = S.line(S.onset("baby_cry", Self.hostileClass, 1, 12.48))
        #expect(EventTextFormat.format(line: onset, timeZone: utc)
            == #"2026-11-30 16:45:12  baby_cry started: "\x1B]0;PWNED\x07\x1B[31mRED\x1B[2K" 100% (stream 12.48 s)"#)
        let health = EventJSON.object(for: HealthEvent(state: .captureLive, message: Self.hostileMessage), time: S.wallClock).encoded
        #expect(EventTextFormat.format(line: health, timeZone: utc)
            == #"2026-11-30 16:45:12  health capture_live: x\x1B[1Ahidden\x0D\x0Aearshotd: fake line"#)
        // Not JSON: the line as it came, escaped too.
        #expect(EventTextFormat.format(line: "\u{1B}[2Jcleared") == #"\x1B[2Jcleared"#)
    }

    @Test("earshot subscribe --format text prints no control character the socket sent", .needsEarshotBuilt)
    func subscribeEscapes() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        defer { server.stop() }
        let run = EventServerClientTests.runInBackground(["subscribe", "--socket", path, "--format", "text"])
        try #require(run.started)
        #expect(S.eventually { server.statistics.subscribers == 1 })
        server.publish(S.onset("baby_cry", Self.hostileClass, 1, 12.48), time: S.wallClock)
        server.publish(HealthEvent(state: .captureLive, message: Self.hostileMessage), time: S.wallClock)
        server.stop()
        let outcome = try #require(run.wait())
        #expect(outcome.status == 0)
        let local = LocalTime.dateTimeText(S.wallClock, timeZone: LocalTime.zone())
        #expect(outcome.standardOutput == """
            \(local)  baby_cry started: "\\x1B]0;PWNED\\x07\\x1B[31mRED\\x1B[2K" 100% (stream 12.48 s)
            \(local)  health capture_live: x\\x1B[1Ahidden\\x0D\\x0Aearshotd: fake line
            earshotd stopped (shutdown notice)

            """)
        #expect(outcome.standardError == "")
    }
}
