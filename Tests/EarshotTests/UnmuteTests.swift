import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotAudio
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// Unmuting a group while its event is still going on announces that event: its held-back onset goes out then, with
/// its original stream times and `"reason":"unmuted"`, to every output, and its end follows as usual.
@Suite("Unmute: an event still open is announced")
struct UnmuteTests {
    static func onset(_ group: String, start: Double) -> DetectionStage.Output {
        .detection(.onset(.init(group: group, classLabel: "x", confidence: 0.9, start: start, decisionTime: start + 1)))
    }

    static func end(_ group: String, start: Double) -> DetectionStage.Output {
        .detection(.offset(.init(group: group, classLabel: "x", start: start, end: start + 5, peakConfidence: 0.9,
                                 meanConfidence: 0.8, positiveWindows: 4, reason: .holdElapsed)))
    }

    static func key(_ output: DetectionStage.Output?) -> String {
        switch output {
        case .detection(.onset(let onset)): "onset \(onset.group) \(onset.start)"
        case .alarm(let alarm): "alarm \(alarm.kind) \(alarm.group) \(alarm.start)"
        case nil: "nil"
        default: "other"
        }
    }

    @Test("GroupMutes: a muted onset is held while its event is open, taken once after unmuting, and its end then passes; an ended event and a chirp leave nothing")
    func heldOnsets() {
        let mutes = GroupMutes()
        #expect(mutes.mute("baby_cry", until: .infinity, minutes: 15))
        #expect(!mutes.admits(Self.onset("baby_cry", start: 2.4)))
        #expect(Self.key(mutes.takeHeldOnset(of: "baby_cry")) == "nil")  // still muted
        #expect(mutes.unmute("baby_cry"))
        #expect(Self.key(mutes.takeHeldOnset(of: "baby_cry")) == "onset baby_cry 2.4")
        #expect(Self.key(mutes.takeHeldOnset(of: "baby_cry")) == "nil")  // once
        #expect(mutes.admits(Self.end("baby_cry", start: 2.4)))  // its onset went out: so does its end

        // Ended while muted: the end is held back with its onset, and nothing is left to announce.
        #expect(mutes.mute("baby_cry", until: .infinity, minutes: 15))
        #expect(!mutes.admits(Self.onset("baby_cry", start: 20)))
        #expect(!mutes.admits(Self.end("baby_cry", start: 20)))
        #expect(mutes.unmute("baby_cry"))
        #expect(Self.key(mutes.takeHeldOnset(of: "baby_cry")) == "nil")

        // Muted after its onset went out: the end still goes out, nothing is held.
        #expect(mutes.admits(Self.onset("loud", start: 30)))
        #expect(mutes.mute("loud", until: .infinity, minutes: 15))
        #expect(mutes.admits(Self.end("loud", start: 30)))
        #expect(mutes.unmute("loud"))
        #expect(Self.key(mutes.takeHeldOnset(of: "loud")) == "nil")

        // A chirp has no end: one heard while muted is dropped, never announced later.
        let chirp = AlarmEvent(kind: .onset, group: AlarmEvent.alarmChirp, source: .pattern, pattern: .chirp, cycles: 3,
                               toneHz: 3000, toneLevelDBFS: -30, classifierScore: nil, classifierClass: nil, start: 40, time: 80)
        #expect(mutes.mute(AlarmEvent.alarmChirp, until: .infinity, minutes: 15))
        #expect(!mutes.admits(.alarm(chirp)))
        #expect(mutes.unmute(AlarmEvent.alarmChirp))
        #expect(Self.key(mutes.takeHeldOnset(of: AlarmEvent.alarmChirp)) == "nil")
    }

    @Test("GroupMutes: a mute ends at its end (not before), once, with its minutes; a renewal moves the end and keeps it muted; an unmute ends it")
    func muteEnds() {
        let mutes = GroupMutes()
        #expect(mutes.mute("smoke_alarm", until: 960, minutes: 15))
        #expect(mutes.mute("baby_cry", until: 28_860, minutes: 480))
        #expect(mutes.expire(at: 959.999).isEmpty)
        // Renewed at 100 s for 15 min: 1000 s.
        #expect(!mutes.mute("smoke_alarm", until: 1000, minutes: 15))
        #expect(mutes.expire(at: 960).isEmpty)
        #expect(mutes.muted == ["smoke_alarm", "baby_cry"])
        let ended = mutes.expire(at: 1000)
        #expect(ended.map(\.group) == ["smoke_alarm"])
        #expect(ended.map(\.mute) == [GroupMutes.Mute(end: 1000, minutes: 15)])
        #expect(mutes.expire(at: 1000).isEmpty)
        #expect(mutes.muted == ["baby_cry"])
        #expect(mutes.unmute("baby_cry"))
        #expect(!mutes.unmute("baby_cry"))
        #expect(mutes.expire(at: 1e9).isEmpty)
        // An onset held while muted is announced once the mute ended by itself.
        #expect(mutes.mute("baby_cry", until: 60, minutes: 1))
        #expect(!mutes.admits(Self.onset("baby_cry", start: 30)))
        #expect(Self.key(mutes.takeHeldOnset(of: "baby_cry")) == "nil")
        #expect(mutes.expire(at: 60).map(\.group) == ["baby_cry"])
        #expect(Self.key(mutes.takeHeldOnset(of: "baby_cry")) == "onset baby_cry 30.0")
    }

    @Test("earshotd: the announced onset's JSON line, journal entry and text line")
    func announcedOnsetForms() {
        let onset = DetectionEvent.onset(.init(group: "baby_cry", classLabel: "Baby cry, infant cry", confidence: 0.9958, start: 2.4, decisionTime: 3.84))
        let time = Date(timeIntervalSince1970: 1_796_554_800.125)
        let routed = RoutedOutput(output: .detection(onset), time: time, announcedOnUnmute: true)
        let line = EventLines.object(for: routed)?.encoded
        #expect(line == #"{"type":"detection","group":"baby_cry","class":"Baby cry, infant cry","confidence":0.9958,"stream_time":2.4,"reason":"unmuted","time":"2026-12-06T11:00:00.125Z"}"#)
        #expect(EventLines.object(for: RoutedOutput(output: .detection(onset), time: time))?["reason"] == nil)
        let fields = JournalSink.announcedOnUnmute(JournalSink.fields(for: onset, identifier: "earshotd"))
        #expect(fields.first?.value == #"baby_cry detected: "Baby cry, infant cry" (confidence 1.00) at stream time 2.40 s (announced on unmute)"#)
        #expect(fields.last == JournalSink.Field("EARSHOT_ONSET_REASON", "unmuted"))
        #expect(EventTextFormat.format(line: line ?? "", timeZone: TimeZone(identifier: "UTC")!)
                == #"2026-12-06 11:00:00  baby_cry started: "Baby cry, infant cry" 100% (stream 2.40 s, announced on unmute)"#)
    }

    // MARK: The real daemon

    /// S16_LE mono at 16 kHz of a file's first `from..<to` seconds.
    static func pcm(_ url: URL, from: Double = 0, to: Double = .infinity) throws -> Data {
        let decoder = try AudioFileDecoder(url: url)
        #expect(decoder.sampleRate == 16_000)
        let samples = try decoder.readAllMono()
        let first = min(samples.count, Int(from * 16_000)), last = min(samples.count, Int(min(to, 1e6) * 16_000))
        var data = Data(capacity: (last - first) * 2)
        for sample in samples[first..<last] {
            let value = Int16(max(-32_768, min(32_767, (sample * 32_768).rounded())))
            withUnsafeBytes(of: value.littleEndian) { data.append(contentsOf: $0) }
        }
        return data
    }

    /// A connection for commands and status requests.
    final class Control {
        let client: EventSubscriber

        init(socket: String) throws {
            var client: EventSubscriber?
            _ = TestWait.until(seconds: 20) {
                client = try? EventSubscriber(path: socket)
                return client != nil
            }
            self.client = try #require(client, "no event socket at \(socket)")
        }

        func ask(_ line: String) throws -> [String: Any] {
            try client.send(line: line)
            let reply = try client.nextLine(timeoutSeconds: 30) { $0.hasPrefix(#"{"type":"mute""#) || $0.hasPrefix(#"{"type":"status""#) || $0.hasPrefix(#"{"type":"error""#) }
            return try #require((try? JSONSerialization.jsonObject(with: Data((reply ?? "").utf8))) as? [String: Any], "no reply to \(line)")
        }

        /// Waits until the daemon has analysed the audio up to `seconds` of stream time; the status then.
        func status(after seconds: Double) throws -> [String: Any] {
            var status: [String: Any] = [:]
            _ = TestWait.until(seconds: 30) {
                status = (try? ask(#"{"status":true}"#)) ?? [:]
                return (status["stream_time"] as? Double ?? 0) >= seconds
            }
            return status
        }
    }

    /// A line without its wall-clock `time`.
    static func timeless(_ line: String) -> String {
        line.replacingOccurrences(of: #","time":"[^"]*""#, with: "", options: .regularExpression)
    }

    /// An alarm onset's line without the classifier's part of its evidence and its decision time.
    static func withoutFusion(_ line: String) -> String {
        line.replacingOccurrences(of: #""(source|confidence|classifier_score|class|decision_time)":("[^"]*"|[0-9.]+),"#, with: "", options: .regularExpression)
    }

    static func lines(_ daemon: DaemonProcess, group: String) -> [String] {
        daemon.lines.map(\.line).filter { $0.contains(#""group":"\#(group)""#) }.map(timeless)
    }

    @Test("A smoke alarm muted by MQTT while it sounds, unmuted 15 s in: announced then (stdout, socket, journal, MQTT state ON, event and attributes), with its original start and reason unmuted; its end and the history follow",
          .needsMosquitto, .needsEarshotdBuilt, .needsShared)
    func alarmUnmutedWhileSounding() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(port: broker.port, node: "hall")
        defer { setup.remove() }
        let history = setup.directory.appendingPathComponent("h.sqlite3").path
        try (try String(contentsOf: setup.config, encoding: .utf8))
            .replacingOccurrences(of: "journal = false\n[history]\nenabled = false", with: "[history]\npath = \(history)")
            .write(to: setup.config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-", "--input-speed", "max"], standardInput: true)
        let control = try Control(socket: setup.socket)
        let events = try EventSubscriber(path: setup.socket)
        try events.subscribe(groups: ["smoke_alarm"])
        #expect(subscriber.waitFor(seconds: 20) { $0.contains { $0.topic == "earshot/hall/smoke_alarm/enabled" && $0.payload == "ON" } }, "\(daemon.errorText)")
        try MQTTPublish.send(port: broker.port, topic: "earshot/hall/smoke_alarm/set", payload: "OFF")
        #expect(subscriber.waitFor(seconds: 10) { $0.contains { $0.topic == "earshot/hall/smoke_alarm/enabled" && $0.payload == "OFF" } })

        // The alarm sounds from 6.0 s (decided at 9.94 s) to the file's end at 85.5 s; 15 s go by muted.
        let alarm = TestPaths.sharedFile("audio/alarm-firealarm-detector/Alarm_0.wav")
        daemon.input.fileHandleForWriting.write(try Self.pcm(alarm, to: 15))
        let muted = try control.status(after: 14.88)
        #expect(muted["active"] as? [String] == ["smoke_alarm"])
        #expect(muted["muted"] as? [String] == ["smoke_alarm"])
        #expect(Self.lines(daemon, group: "smoke_alarm") == [])

        try MQTTPublish.send(port: broker.port, topic: "earshot/hall/smoke_alarm/set", payload: "ON")
        #expect(TestWait.until(seconds: 10) { Self.lines(daemon, group: "smoke_alarm").count == 1 }, "\(daemon.errorText)")
        // Whether the classifier's windows up to the decision were fused into the onset depends on how the pipe's
        // audio was cut into reads (`source`, `confidence`, `classifier_score`, `class`); everything else is pinned.
        let onset = try #require(Self.lines(daemon, group: "smoke_alarm").first)
        #expect(Self.withoutFusion(onset) == #"{"type":"detection","group":"smoke_alarm","pattern":"T3","cycles":1,"tone_hz":3132,"tone_dbfs":-30.7,"stream_time":6.006,"reason":"unmuted"}"#)
        // The second T3 cycle decides it at 9.94 s (`earshot detect`); where the reads were cut moves it by a hop.
        let decision = try #require((try? JSONSerialization.jsonObject(with: Data(onset.utf8)) as? [String: Any])?["decision_time"] as? Double)
        #expect((9.9...10.0).contains(decision), "\(onset)")
        #expect(onset.hasPrefix(#"{"type":"detection","group":"smoke_alarm","source":"pattern"#))
        let socketLine = try events.nextLine(timeoutSeconds: 10) { $0.contains(#""type":"detection""#) }
        #expect(socketLine.map(Self.timeless) == onset)
        #expect(subscriber.waitFor(seconds: 10) { _ in subscriber.messages(on: "earshot/hall/smoke_alarm/state").last?.payload == "ON" })
        let unmuted = try control.ask(#"{"status":true}"#)
        #expect(unmuted["active"] as? [String] == ["smoke_alarm"])
        #expect(unmuted["muted"] as? [String] == [])
        #expect(unmuted["detections"] as? Int == 1)

        daemon.input.fileHandleForWriting.write(try Self.pcm(alarm, from: 15))
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 60) == 0, "\(daemon.errorText)")
        let end = #"{"type":"detection_end","group":"smoke_alarm","source":"pattern+classifier","pattern":"T3","cycles":10,"tone_hz":3132,"tone_dbfs":-30.7,"confidence":0.9939,"classifier_score":0.9388,"class":"Smoke detector, smoke alarm","start":6.006,"end":84.96,"duration":78.954,"reason":"stream_end"}"#
        #expect(Self.lines(daemon, group: "smoke_alarm") == [onset, end])
        let journal = daemon.errorText.split(separator: "\n").map(String.init)
        let unmutedAt = try #require(journal.firstIndex(of: "earshotd: smoke_alarm unmuted by an MQTT command"), "\(journal)")
        #expect(journal[unmutedAt + 1].hasPrefix("earshotd: smoke_alarm detected: T3 pattern at 3132 Hz (1 cycle"))
        #expect(journal[unmutedAt + 1].hasSuffix(") at stream time 6.01 s (announced on unmute)"))

        // MQTT: the same event, the binary sensor ON then OFF, the onset on `detected` and in the attributes.
        #expect(subscriber.waitFor(seconds: 10) { _ in subscriber.messages(on: "earshot/hall/smoke_alarm/state").last?.payload == "OFF" })
        let mqttEvents = subscriber.messages(on: "earshot/hall/event").compactMap { message -> String? in
            guard message.payload.contains(#""group":"smoke_alarm""#) else { return nil }
            return Self.timeless(message.payload).replacingOccurrences(of: #","node":"hall""#, with: "")
        }
        #expect(mqttEvents == [onset, end])
        #expect(subscriber.messages(on: "earshot/hall/smoke_alarm/state").map(\.payload) == ["OFF", "ON", "OFF"])
        let detected = subscriber.messages(on: "earshot/hall/detected").compactMap(\.json).filter { $0["event_type"] as? String == "smoke_alarm" }
        #expect(detected.count == 1)
        #expect(detected.first?["reason"] as? String == "unmuted")
        let attributes = subscriber.messages(on: "earshot/hall/smoke_alarm/attributes").compactMap(\.json)
        #expect(attributes.count == 2)
        #expect(attributes.first?["stream_time"] as? Double == 6.006)
        #expect(attributes.first?["reason"] as? String == "unmuted")
        #expect(attributes.last?["reason"] as? String == "stream_end")

        // The history has the whole event.
        let stored = try EventHistory(path: history, access: .readOnly).events()
        #expect(stored.map(\.group) == ["smoke_alarm"])
        #expect(abs((stored.first.map { $0.end.timeIntervalSince($0.start) } ?? 0) - 78.954) < 0.002)
    }

    @Test("baby_cry muted over the socket, unmuted while the baby cries: announced then with its original start; one that ended while muted is never announced",
          .needsEarshotdBuilt)
    func classifierGroupUnmuted() throws {
        let scratch = try StopAndPathTests.Scratch()
        defer { scratch.remove() }
        let config = scratch.path("earshotd.conf")
        let socket = scratch.path("e.sock")
        try "[detection]\nwatch = baby_cry | snoring\n[output]\nsocket = \(socket)\njournal = false\n[history]\nenabled = false\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        let demo = TestPaths.packageRoot.appendingPathComponent("samples/demo.flac")

        // The baby cries from 2.40 s to 9.60 s (its onset decided at 3.84 s); unmuted at 5 s.
        let daemon = try DaemonProcess(["--config", config, "--foreground", "--input", "-", "--input-speed", "max"], standardInput: true)
        let control = try Control(socket: socket)
        #expect(try control.ask(#"{"cmd":"mute","group":"baby_cry"}"#)["changed"] as? Bool == true)
        daemon.input.fileHandleForWriting.write(try Self.pcm(demo, to: 5))
        #expect(try control.status(after: 4.8)["active"] as? [String] == ["baby_cry"])
        #expect(Self.lines(daemon, group: "baby_cry") == [])
        #expect(try control.ask(#"{"cmd":"unmute","group":"baby_cry"}"#)["changed"] as? Bool == true)
        let onset = #"{"type":"detection","group":"baby_cry","class":"builtin_baby_cry:baby_cry","confidence":0.9958,"stream_time":2.4,"reason":"unmuted"}"#
        #expect(TestWait.until(seconds: 10) { Self.lines(daemon, group: "baby_cry") == [onset] }, "\(Self.lines(daemon, group: "baby_cry"))")
        daemon.input.fileHandleForWriting.write(try Self.pcm(demo, from: 5))
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 60) == 0, "\(daemon.errorText)")
        #expect(Self.lines(daemon, group: "baby_cry") == [
            onset,
            #"{"type":"detection_end","group":"baby_cry","class":"builtin_baby_cry:baby_cry","start":2.4,"end":9.6,"duration":7.2,"peak_confidence":0.9983,"mean_confidence":0.9874,"windows":9,"reason":"hold_elapsed"}"#,
        ])

        // Unmuted at 14 s, after its end: nothing of it goes out.
        let later = try DaemonProcess(["--config", config, "--foreground", "--input", "-", "--input-speed", "max"], standardInput: true)
        let control2 = try Control(socket: socket)
        #expect(try control2.ask(#"{"cmd":"mute","group":"baby_cry"}"#)["changed"] as? Bool == true)
        later.input.fileHandleForWriting.write(try Self.pcm(demo, to: 14))
        let before = try control2.status(after: 13.9)
        #expect(before["stream_time"] as? Double == 13.92)
        #expect((before["active"] as? [String])?.contains("baby_cry") == false, "\(before)")
        #expect(try control2.ask(#"{"cmd":"unmute","group":"baby_cry"}"#)["changed"] as? Bool == true)
        later.input.fileHandleForWriting.write(try Self.pcm(demo, from: 14))
        try later.input.fileHandleForWriting.close()
        #expect(later.wait(seconds: 60) == 0, "\(later.errorText)")
        #expect(Self.lines(later, group: "baby_cry") == [])
        #expect(Self.lines(later, group: "snoring").count == 2)
    }
}
