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
            // MQTT stays off: notifications still name the daemon by its [mqtt] node.
            "[mqtt]", "node = kitchen",
        ]
        try (lines.joined(separator: "\n") + "\n").write(to: config, atomically: true, encoding: .utf8)
        return config
    }

    /// Whether `request` is a smoke alarm's notification (its title names it): those go on the URL's alarm channel.
    static func isSmoke(_ request: HTTPTestServer.Request) -> Bool {
        request.header("Title")?.contains("Smoke alarm") ?? false
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

        // The local clock times vary from run to run: shown as HH:MM:SS.
        func texts(_ requests: [HTTPTestServer.Request]) -> [String] {
            requests.map { $0.body.replacing(/[0-9]{2}:[0-9]{2}:[0-9]{2}/, with: "HH:MM:SS") }
        }
        // Smoke alarms have a channel of their own per URL (trial 15 L2): the order is pinned within each channel,
        // not between them (the alarm's end and "monitoring stopped" go out together at the stop).
        let alarmRequests = alarmServer.waitForRequests(4, timeout: 10)
        let (smoke, other) = (alarmRequests.filter { Self.isSmoke($0) }, alarmRequests.filter { !Self.isSmoke($0) })
        #expect(texts(smoke) == [
            "Smoke alarm sounding in kitchen at HH:MM:SS\nT3 pattern at 3057 Hz (confidence 1.0)",
            // The file ends within the alarm's 10 s hold: not an all-clear (NotifyDeliveryTests.endTexts).
            "Smoke alarm heard in kitchen for 11.0 s, then monitoring stopped at HH:MM:SS (earshotd stopped or its input ended)\nT3 pattern at 3057 Hz",
        ])
        #expect(texts(other) == [
            "Listening in kitchen since HH:MM:SS (earshotd started)\ncapturing from \(TestPaths.sharedFile(MQTTBrokerTests.alarm).path): FLOAT_LE, 1 channel, 48000 Hz, period 9600 frames, buffer 9600 frames",
            "Not listening in kitchen since HH:MM:SS: earshotd stopped (or its input ended)",
        ])
        #expect(smoke.map { $0.header("Title") ?? "" } == ["kitchen: Smoke alarm", "kitchen: Smoke alarm: monitoring stopped"])
        #expect(other.map { $0.header("Title") ?? "" } == ["kitchen: listening", "kitchen: monitoring stopped"])
        #expect(smoke.map { $0.header("Priority") ?? "" } == ["5", "4"])
        #expect(other.map { $0.header("Priority") ?? "" } == ["2", "4"])
        // The start comes first: the alarm is heard after earshotd said it listens.
        #expect(alarmRequests.first?.header("Title") == "kitchen: listening")

        let demoRequests = demoServer.waitForRequests(6, timeout: 10)
        #expect(texts(demoRequests) == [
            "Listening in kitchen since HH:MM:SS (earshotd started)\ncapturing from samples/demo.flac: FLOAT_LE, 1 channel, 16000 Hz, period 3200 frames, buffer 3200 frames",
            "Baby cry heard in kitchen at HH:MM:SS\nconfidence 1.0", "Baby cry in kitchen ended at HH:MM:SS, after 7.2 s",
            "Glass break heard in kitchen at HH:MM:SS\nShatter (confidence 0.91)", "Glass break in kitchen ended at HH:MM:SS, after 1.0 s\nShatter",
            "Not listening in kitchen since HH:MM:SS: earshotd stopped (or its input ended)",
        ])
        #expect(demoRequests.map { $0.header("Title") ?? "" } == [
            "kitchen: listening", "kitchen: Baby cry", "kitchen: Baby cry ended", "kitchen: Glass break",
            "kitchen: Glass break ended", "kitchen: monitoring stopped",
        ])
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
        // Smoke, CO and fire go on a channel of their own (trial 15 L2): in their order among themselves, then the
        // others in theirs (the two channels may interleave in any order).
        let arrived = server.waitForRequests(outputs.count, timeout: 10)
        sink.stop()
        let urgent = arrived.filter { $0.header("Priority") == "5" || $0.body.hasPrefix("CO alarm in kitchen ended") }
        let requests = urgent + arrived.filter { request in !urgent.contains { $0.receivedAt == request.receivedAt && $0.body == request.body } }
        #expect(requests.map(\.body) == [
            "CO alarm sounding in kitchen at \(receiver.heard)\nT4 pattern at 3150 Hz (confidence 0.9)",
            "CO alarm in kitchen ended at \(receiver.heard), after 60.0 s\nT4 pattern at 3150 Hz",
            "Smoke alarm sounding in kitchen at \(receiver.heard)\nalarm tone at 3100 Hz (confidence 0.94)",
            "Smoke alarm low battery chirp heard in kitchen at \(receiver.heard)\na chirp every 42.0 s at 3300 Hz (confidence 0.9)",
            "Loud sound heard in kitchen at \(receiver.heard)\n-10.6 dBFS (confidence 0.82)",
            "Doorbell heard in kitchen at \(receiver.heard)\nDing dong (confidence 0.93)",
        ])
        #expect(requests.map { $0.header("Title") ?? "" } == [
            "kitchen: CO alarm", "kitchen: CO alarm ended", "kitchen: Smoke alarm", "kitchen: Smoke alarm low battery chirp",
            "kitchen: Loud sound", "kitchen: Doorbell",
        ])
    }
}
