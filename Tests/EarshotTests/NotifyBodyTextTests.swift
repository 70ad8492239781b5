import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotDetection
import EarshotOutputs

/// What an ntfy push says: what was heard in words (the AudioSet name, a model's label, the alarm pattern), never a
/// model's internal class id; checked on a real HTTP server on 127.0.0.1.
@Suite("Notify: ntfy bodies in words")
struct NotifyBodyTextTests {
    /// A configuration sending every onset and end of `watch` to `url` in ntfy's format.
    static func daemonConfig(in directory: URL, watch: String, url: String) throws -> URL {
        let config = directory.appendingPathComponent("earshotd.conf")
        let lines = [
            "[output]", "socket = \(directory.appendingPathComponent("e.sock").path)", "journal = false",
            "[history]", "enabled = false",
            "[detection]", "watch = \(watch)",
            "[notify]", "url = \(url)", "format = ntfy", "on_end = true",
        ]
        try (lines.joined(separator: "\n") + "\n").write(to: config, atomically: true, encoding: .utf8)
        return config
    }

    static func temporaryDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-ntfy-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    @Test("earshotd on a real T3 smoke alarm and on samples/demo.flac: the bodies, titles and priorities pushed",
          .needsEarshotdBuilt, .needsShared)
    func daemonBodies() throws {
        let alarmServer = try HTTPTestServer { _ in .init(status: 200) }
        let demoServer = try HTTPTestServer { _ in .init(status: 200) }
        defer {
            alarmServer.stop()
            demoServer.stop()
        }
        let directories = try (0..<2).map { _ in try Self.temporaryDirectory() }
        defer { for directory in directories { try? FileManager.default.removeItem(at: directory) } }
        let alarmConfig = try Self.daemonConfig(in: directories[0], watch: "smoke_alarm", url: alarmServer.url("/alarm"))
        let demoConfig = try Self.daemonConfig(in: directories[1], watch: "baby_cry | glass_break", url: demoServer.url("/demo"))
        let alarm = try DaemonProcess([
            "--config", alarmConfig.path, "--foreground", "--input-speed", "4", "--input", TestPaths.sharedFile(MQTTBrokerTests.alarm).path,
        ])
        let demo = try DaemonProcess(["--config", demoConfig.path, "--foreground", "--input-speed", "4", "--input", "samples/demo.flac"])
        #expect(alarm.wait(seconds: 60) == 0, "\(alarm.errorText)")
        #expect(demo.wait(seconds: 90) == 0, "\(demo.errorText)")

        let alarmRequests = alarmServer.waitForRequests(2, timeout: 10)
        #expect(alarmRequests.map(\.body) == [
            "Smoke alarm: T3 pattern at 3057 Hz (confidence 1.0)",
            // The file ends within the alarm's 10 s hold: not an all-clear (NotifyDeliveryTests.endTexts).
            "Smoke alarm heard for 11.3 s, then monitoring stopped (earshotd stopped or its input ended) (T3 pattern at 3057 Hz)",
        ])
        #expect(alarmRequests.map { $0.header("Title") ?? "" } == ["Smoke alarm", "Smoke alarm: monitoring stopped"])
        #expect(alarmRequests.map { $0.header("Priority") ?? "" } == ["5", "4"])

        let demoRequests = demoServer.waitForRequests(4, timeout: 10)
        #expect(demoRequests.map(\.body) == [
            "Baby cry (confidence 1.0)", "Baby cry ended after 7.2 s",
            "Shatter (confidence 0.91)", "Shatter ended after 1.0 s",
        ])
        #expect(demoRequests.map { $0.header("Title") ?? "" } == ["Baby cry", "Baby cry ended", "Glass break", "Glass break ended"])
        #expect(!demoRequests.contains { $0.body.contains("builtin_") })
    }

    @Test("T4, a steady tone, a low-battery chirp, the loud group and a custom model's class, as pushed")
    func sinkBodies() throws {
        let receiver = try NotifyTests.NtfyReceiver(path: "/t")
        defer { receiver.stop() }
        let (server, sink) = (receiver.server, receiver.sink)
        let t4 = AlarmEvent(
            kind: .onset, group: "co_alarm", source: .pattern, pattern: .t4, cycles: 2, toneHz: 3150.4,
            toneLevelDBFS: -20, classifierScore: nil, classifierClass: nil, start: 1, time: 7)
        var t4End = t4
        t4End.kind = .end
        t4End.time = 61
        let tone = AlarmEvent(
            kind: .onset, group: "smoke_alarm", source: .toneAndClassifier, pattern: nil, cycles: 0, toneHz: 3100,
            toneLevelDBFS: -15, classifierScore: 0.8, classifierClass: "Smoke detector, smoke alarm", start: 2, time: 12)
        let chirp = AlarmEvent(
            kind: .onset, group: "alarm_chirp", source: .pattern, pattern: .chirp, cycles: 2, toneHz: 3300,
            toneLevelDBFS: -30, classifierScore: nil, classifierClass: nil, start: 40, time: 40.2, intervalSeconds: 42)
        let outputs: [DaemonOutput] = [
            .alarm(t4), .alarm(t4End), .alarm(tone), .alarm(chirp),
            .detection(.onset(.init(group: "loud", classLabel: "-10.6 dBFS", confidence: 0.8227, start: 1.44, decisionTime: 2.88))),
            .detection(.onset(.init(group: "doorbell", classLabel: "front_door:ding_dong", confidence: 0.93, start: 3, decisionTime: 4))),
        ]
        for output in outputs { receiver.deliver(output) }
        let requests = server.waitForRequests(outputs.count, timeout: 10)
        sink.stop()
        #expect(requests.map(\.body) == [
            "CO alarm: T4 pattern at 3150 Hz (confidence 0.9)",
            "CO alarm ended after 60.0 s (T4 pattern at 3150 Hz)",
            "Smoke alarm: alarm tone at 3100 Hz (confidence 0.94)",
            "Alarm chirp: a chirp every 42.0 s at 3300 Hz (confidence 0.9)",
            "Loud sound: -10.6 dBFS (confidence 0.82)",
            "Ding dong (confidence 0.93)",
        ])
        #expect(requests.map { $0.header("Title") ?? "" } == ["CO alarm", "CO alarm ended", "Smoke alarm", "Alarm chirp", "Loud", "Doorbell"])
    }
}
