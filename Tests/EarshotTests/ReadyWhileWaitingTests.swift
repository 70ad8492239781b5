import Foundation
import Glibc
import Testing
import EarshotTools

/// Trial 6 #3: with the capture device missing at start, earshotd still tells systemd READY=1 once it serves (the
/// socket is up), with `STATUS=` saying what it waits for, so that a `Type=notify` unit does not kill it at its
/// start timeout. A real earshotd, a real datagram socket as NOTIFY_SOCKET.
@Suite("sd_notify: READY while waiting for the capture device")
struct ReadyWhileWaitingTests {
    @Test("a missing device: STATUS=opening, then READY=1 with STATUS=waiting for it; the socket serves; SIGTERM: STOPPING=1", .needsEarshotdBuilt)
    func readyWhileDeviceIsMissing() throws {
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let notify = try DaemonEndToEndTests.NotifyListener(path: sandbox.notifySocket)
        let daemon = Process()
        daemon.executableURL = DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = ["--device", "hw:97,0", "--socket", sandbox.socket, "--no-journal"]
        var environment = DaemonEndToEndTests.environment(home: sandbox.home)
        environment["NOTIFY_SOCKET"] = sandbox.notifySocket
        daemon.environment = environment
        daemon.standardError = FileHandle.nullDevice
        try daemon.run()
        defer { if daemon.isRunning { daemon.terminate() } }

        let messages = notify.messages(until: "READY=1", seconds: 20)
        let waiting = "waiting for capture device \"hw:97,0\": cannot open capture device \"hw:97,0\": No such file or directory (no such device; list devices with `earshot devices` or `arecord -L`)"
        #expect(messages == ["STATUS=opening capture device \"hw:97,0\"", "READY=1\nSTATUS=\(waiting)"])
        // Serving: the socket answers a status request while the device is away.
        let client = try EventSubscriber(path: sandbox.socket)
        try client.send(line: #"{"cmd":"status"}"#)
        let reply = try client.nextLine(timeoutSeconds: 5) { $0.contains(#""type":"status""#) }
        #expect(DaemonEndToEndTests.parse(reply ?? "")["capture"] as? String == "unavailable")
        // No audio arrives: no level and no gate state (null), rather than -120 dBFS of a silent room (trial 10 #9).
        #expect(reply?.contains(#""level_dbfs":null,"gate_open":null,"classes":[],"#) == true, "\(reply ?? "")")
        // The retries (after 1 and 2 s) fail the same way: nothing more is sent, no second READY=1.
        let later = notify.messages(until: "READY=1", seconds: 2.5)
        #expect(later == [])
        daemon.terminate()
        let stopping = notify.messages(until: "STOPPING=1", seconds: 5)
        #expect(stopping.last == "STOPPING=1\nSTATUS=stopping: signal 15")
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 0)
    }
}
