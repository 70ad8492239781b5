import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// A mute ends (trial 15 M5 and L5): a group muted at run time is unmuted by itself when its time is up (15 min for
/// the smoke, CO and fire alarms, 8 h for the others, or the `minutes` asked for), as by `unmute`; the phone is told
/// when a life-safety group is muted and when it listens again; `earshot mute` and `earshot unmute` send the commands.
@Suite("Mutes end: durations, the phone told, earshot mute and unmute")
struct MuteEndTests {
    @Test("The mute notifications: ntfy's title, lines, priority and tags, and the JSON object, for muted, unmuted and a mute that ended; only the life-safety groups [notify] notifies")
    func notificationForms() {
        let time = Date(timeIntervalSince1970: 1_796_583_600)  // 2026-12-06T19:00:00Z
        let until = time.addingTimeInterval(900)
        let muted = MuteChange(group: "smoke_alarm", kind: .muted(minutes: 15, until: until), requestedBy: "over the event socket")
        let ntfy = NotificationMessage.mute(muted, node: "kitchen", time: time, format: .ntfy)
        #expect(ntfy.headers == ["Title: kitchen: Smoke alarm muted", "Priority: 3", "Tags: mute,smoke_alarm",
                                 "Content-Type: text/plain; charset=utf-8"])
        #expect(String(decoding: ntfy.body, as: UTF8.self) == """
            Smoke alarm muted in kitchen at \(MuteText.clock(time)) for 15 min, until \(MuteText.clock(until))
            No smoke alarm alerts until then (muted over the event socket)
            """)
        let json = NotificationMessage.mute(muted, node: "kitchen", time: time, format: .json)
        #expect(String(decoding: json.body, as: UTF8.self)
                == #"{"type":"mute","group":"smoke_alarm","muted":true,"minutes":15,"until":"2026-12-06T19:15:00.000Z","by":"over the event socket","time":"2026-12-06T19:00:00.000Z","node":"kitchen"}"#)

        let unmuted = NotificationMessage.mute(
            MuteChange(group: "co_alarm", kind: .unmuted, requestedBy: "by an MQTT command"), node: "kitchen", time: time, format: .ntfy)
        #expect(unmuted.headers.prefix(3) == ["Title: kitchen: CO alarm listening again", "Priority: 2", "Tags: white_check_mark,co_alarm"])
        #expect(String(decoding: unmuted.body, as: UTF8.self)
                == "CO alarm listening again in kitchen since \(MuteText.clock(time))\nunmuted by an MQTT command")
        let ended = MuteChange(group: "smoke_alarm", kind: .ended(minutes: 15))
        let endedNtfy = NotificationMessage.mute(ended, node: "", time: until, format: .ntfy)
        #expect(endedNtfy.headers.prefix(3) == ["Title: Smoke alarm listening again", "Priority: 2", "Tags: white_check_mark,smoke_alarm"])
        #expect(String(decoding: endedNtfy.body, as: UTF8.self)
                == "Smoke alarm listening again since \(MuteText.clock(until))\nits 15 min mute ended")
        #expect(String(decoding: NotificationMessage.mute(ended, node: "kitchen", time: until, format: .json).body, as: UTF8.self)
                == #"{"type":"mute","group":"smoke_alarm","muted":false,"reason":"mute_ended","minutes":15,"time":"2026-12-06T19:15:00.000Z","node":"kitchen"}"#)

        // Which sink accepts which: the life-safety groups only, and only those [notify] groups names.
        var settings = NotifySettings()
        settings.urls = ["http://127.0.0.1:9/hook"]
        let sink = try? NotifySink(settings: settings, log: { _, _ in })
        #expect(sink?.accepts(.mute(muted)) == true)
        #expect(sink?.accepts(.mute(MuteChange(group: "baby_cry", kind: .unmuted, requestedBy: "over the event socket"))) == false)
        settings.groups = ["co_alarm"]
        let coOnly = try? NotifySink(settings: settings, log: { _, _ in })
        #expect(coOnly?.accepts(.mute(muted)) == false)
        #expect(coOnly?.accepts(.mute(MuteChange(group: "co_alarm", kind: .ended(minutes: 15)))) == true)
    }

    @Test("Mute words: durations in minutes or whole hours; an end on the next local day says tomorrow; the status line names each end; the journal line")
    func words() {
        #expect([1, 15, 59, 60, 90, 480, 1440].map { MuteText.duration(minutes: $0) } == ["1 min", "15 min", "59 min", "1 h", "90 min", "8 h", "24 h"])
        let now = Date(timeIntervalSince1970: 1_796_583_600)
        #expect(MuteText.clock(now.addingTimeInterval(86_400), now: now) == MuteText.clock(now) + " tomorrow")
        #expect(MuteText.clock(now.addingTimeInterval(59), now: now) == MuteText.clock(now))
        #expect(EarshotDaemon.mutedLine(group: "smoke_alarm", renewed: false, by: "over the event socket", minutes: 15,
                                        until: now.addingTimeInterval(900), now: now)
                == "smoke_alarm muted over the event socket for 15 min, until \(MuteText.clock(now.addingTimeInterval(900))): its events are not published until then")
        #expect(EarshotDaemon.mutedLine(group: "baby_cry", renewed: true, by: "by an MQTT command", minutes: 480,
                                        until: now.addingTimeInterval(86_400), now: now)
                == "baby_cry muted again by an MQTT command for 8 h, until \(MuteText.clock(now)) tomorrow: its events are not published until then")

        let status = #"{"type":"status","uptime":1.0,"capture":"live","source":"x","level_dbfs":-40.0,"gate_open":false,"classes":[],"gate_dbfs":-50.0,"watch":["smoke_alarm","baby_cry","loud"],"active":["smoke_alarm"],"detections":0,"models":[],"muted":["baby_cry","smoke_alarm"],"muted_until":{"baby_cry":"2026-12-07T03:00:00.000Z","smoke_alarm":"2026-12-06T19:15:00.000Z"},"subscribers":1,"time":"2026-12-06T19:00:00.000Z"}"#
        let baby = Date(timeIntervalSince1970: 1_796_583_600 + 8 * 3600), smoke = now.addingTimeInterval(900)
        let lines = HearingTextFormat.status(line: status)?.split(separator: "\n").map(String.init) ?? []
        #expect(lines.dropFirst(3).prefix(2) == [
            "watching: loud",
            "muted: baby_cry until \(MuteText.clock(baby, now: now)), smoke_alarm until \(MuteText.clock(smoke, now: now)) (no events until then); active: smoke_alarm (not reported)",
        ])
    }

    @Test("[detection] alarm_mute_minutes and mute_minutes: defaults 15 and 480, 1 to 1440, a wrong value is one line naming the key; the life-safety groups take the first")
    func configuration() throws {
        let defaults = try DaemonConfiguration.parse("", source: "t.conf")
        #expect(defaults.mutes.alarmMinutes == 15)
        #expect(defaults.mutes.minutes == 480)
        #expect(["smoke_alarm", "co_alarm", "fire_alarm", "baby_cry", "loud"].map(defaults.mutes.defaultMinutes(of:)) == [15, 15, 15, 480, 480])
        let set = try DaemonConfiguration.parse("[detection]\nalarm_mute_minutes = 10\nmute_minutes = 1440\n", source: "t.conf")
        #expect(set.mutes.alarmMinutes == 10)
        #expect(set.mutes.minutes == 1440)
        for bad in ["0", "1441", "7.5", "15 min"] {
            #expect(throws: EarshotError.self) { try DaemonConfiguration.parse("[detection]\nmute_minutes = \(bad)\n", source: "t.conf") }
        }
        let error = #expect(throws: EarshotError.self) { try DaemonConfiguration.parse("[detection]\nalarm_mute_minutes = 0\n", source: "t.conf") }
        #expect(error?.message == "t.conf:2: [detection] alarm_mute_minutes = 0: must be a whole number in [1, 1440] minutes")
    }

    // MARK: The real daemon

    /// Removes consecutive repeats (a reload routes the control state again: the switch's state is published again).
    static func changes(_ values: [String]) -> [String] {
        values.reduce(into: []) { if $0.last != $1 { $0.append($1) } }
    }

    /// `HH:MM` of the moment a command was sent: that of `before` or of `after` (the minute may turn between them).
    static func clockBetween(_ before: Date, _ after: Date) -> Set<String> { [MuteText.clock(before), MuteText.clock(after)] }

    @Test("smoke_alarm muted for 1 minute over the socket while the alarm sounds: the switch OFF, the status shows its end, a reload keeps it; at stream time 60 s it ends by itself, the journal says so, the held onset is announced (reason unmuted) right after that window, the switch ON; the phone is told both; a bad minutes is refused",
          .needsMosquitto, .needsEarshotdBuilt, .needsShared)
    func muteEndsWhileAlarmSounds() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let phone = try HTTPTestServer { _ in .init(status: 200) }
        defer { phone.stop() }
        let setup = try MQTTDaemonSetup(port: broker.port, node: "kitchen", watch: "smoke_alarm | baby_cry")
        defer { setup.remove() }
        try (try String(contentsOf: setup.config, encoding: .utf8) + "[notify]\nurl = \(phone.url("/hook"))\nformat = ntfy\nhealth = false\n")
            .write(to: setup.config, atomically: true, encoding: .utf8)
        // Replayed faster than real time: the mute counts the stream's time (a minute of the recording).
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-", "--input-speed", "max"], standardInput: true)
        let control = try UnmuteTests.Control(socket: setup.socket)
        let windows = try EventSubscriber(path: setup.socket)
        try windows.send(line: #"{"cmd":"listen"}"#)
        #expect(subscriber.waitFor(seconds: 20) { $0.contains { $0.topic == "earshot/kitchen/smoke_alarm/enabled" && $0.payload == "ON" } }, "\(daemon.errorText)")

        #expect(try control.ask(#"{"cmd":"mute","group":"smoke_alarm","minutes":0}"#)["message"] as? String
                == #"mute: "minutes" must be a whole number from 1 to 1440 (got 0)"#)
        let before = Date()
        let reply = try control.ask(#"{"cmd":"mute","group":"smoke_alarm","minutes":1}"#)
        let after = Date()
        let until = try #require(reply["until"] as? String)
        #expect(reply["muted"] as? Bool == true)
        #expect(reply["changed"] as? Bool == true)
        #expect(reply["minutes"] as? Int == 1)
        #expect(subscriber.waitFor(seconds: 10) { _ in subscriber.messages(on: "earshot/kitchen/smoke_alarm/enabled").last?.payload == "OFF" })

        // The alarm sounds from 6.0 s to the file's end at 85.5 s.
        let alarm = TestPaths.sharedFile("audio/alarm-firealarm-detector/Alarm_0.wav")
        daemon.input.fileHandleForWriting.write(try UnmuteTests.pcm(alarm, to: 15))
        let muted = try control.status(after: 14.88)
        #expect(muted["active"] as? [String] == ["smoke_alarm"])
        #expect(muted["muted"] as? [String] == ["smoke_alarm"])
        #expect(muted["muted_until"] as? [String: String] == ["smoke_alarm": until])
        // A reload keeps the mute and its end.
        daemon.signal(SIGHUP)
        #expect(TestWait.until(seconds: 20) { daemon.errorText.contains("earshotd: configuration reloaded") }, "\(daemon.errorText)")
        #expect(try control.ask(#"{"status":true}"#)["muted_until"] as? [String: String] == ["smoke_alarm": until])
        #expect(UnmuteTests.lines(daemon, group: "smoke_alarm") == [])

        daemon.input.fileHandleForWriting.write(try UnmuteTests.pcm(alarm, from: 15))
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 90) == 0, "\(daemon.errorText)")

        // Announced as by an unmute: the onset with its original start, then its end.
        let smoke = UnmuteTests.lines(daemon, group: "smoke_alarm")
        #expect(smoke.count == 2, "\(smoke)")
        #expect(smoke.first.map(UnmuteTests.withoutFusion) == #"{"type":"detection","group":"smoke_alarm","pattern":"T3","cycles":1,"tone_hz":3132,"tone_dbfs":-30.7,"stream_time":6.006,"reason":"unmuted"}"#)
        #expect(smoke.last?.hasPrefix(#"{"type":"detection_end","group":"smoke_alarm""#) == true)
        // Right after the window that reached 60 s of stream time.
        var seen: [String] = []
        while let line = try windows.nextLine(timeoutSeconds: 5, where: { _ in true }) {
            seen.append(line)
            if line.contains(#""type":"shutdown""#) { break }
        }
        let onsetAt = try #require(seen.firstIndex { $0.contains(#""reason":"unmuted""#) }, "\(seen.suffix(5))")
        let window = try #require(seen[..<onsetAt].last { $0.hasPrefix(#"{"type":"window""#) })
        #expect(window.hasPrefix(#"{"type":"window","start":59.04,"end":60.0,"#), "\(window)")

        // The journal: the mute, the reload, then one line when it ended, followed by the announced onset.
        let journal = daemon.errorText.split(separator: "\n").map(String.init)
        let untilDate = try #require(EventTextFormat.date(fromTimestamp: until))
        #expect(journal.contains("earshotd: smoke_alarm muted over the event socket for 1 min, until \(MuteText.clock(untilDate, now: before)): its events are not published until then"), "\(journal)")
        let endedAt = try #require(journal.firstIndex(of: "earshotd: smoke_alarm unmuted: its 1 min mute ended"), "\(journal)")
        #expect(journal[endedAt + 1].hasPrefix("earshotd: smoke_alarm detected: T3 pattern at 3132 Hz (1 cycle"))
        #expect(journal[endedAt + 1].hasSuffix(") at stream time 6.01 s (announced on unmute)"))

        // MQTT: the switch OFF while muted, ON again when the mute ended (retained).
        #expect(subscriber.waitFor(seconds: 10) { _ in subscriber.messages(on: "earshot/kitchen/smoke_alarm/enabled").last?.payload == "ON" })
        let enabled = subscriber.messages(on: "earshot/kitchen/smoke_alarm/enabled")
        #expect(Self.changes(enabled.map(\.payload)) == ["ON", "OFF", "ON"])
        // Retained: a client connecting now (Home Assistant after a restart) is told ON.
        let late = try MQTTSubscriber(port: broker.port)
        #expect(late.waitFor(seconds: 10) { $0.contains { $0.topic == "earshot/kitchen/smoke_alarm/enabled" && $0.retained && $0.payload == "ON" } })

        // The phone: told of the mute, then that it listens again, and the alarm itself (urgent: on a channel of its
        // own, so it may arrive before or after the mute's end).
        let requests = phone.waitForRequests(4, timeout: 15)
        let titles = requests.compactMap { $0.header("Title") }
        #expect(titles.first == "kitchen: Smoke alarm muted", "\(titles)")
        #expect(Set(titles.prefix(3)) == ["kitchen: Smoke alarm muted", "kitchen: Smoke alarm listening again", "kitchen: Smoke alarm"], "\(titles)")
        // The held alarm is told as begun during the mute (trial 16 M1), not as starting when the mute ended.
        let heldAlarm = try #require(requests.first { $0.header("Title") == "kitchen: Smoke alarm" })
        let alarmLine = String(heldAlarm.body.split(separator: "\n").first ?? "")
        #expect(alarmLine.hasPrefix("Smoke alarm sounding in kitchen: it began while muted, announced at "), "\(alarmLine)")
        #expect(alarmLine.hasSuffix(" when unmuted"), "\(alarmLine)")
        #expect(heldAlarm.header("Priority") == "5")
        let mutedBodies = Self.clockBetween(before, after).map {
            "Smoke alarm muted in kitchen at \($0) for 1 min, until \(MuteText.clock(untilDate, now: before))\nNo smoke alarm alerts until then (muted over the event socket)"
        }
        #expect(mutedBodies.contains(requests.first?.body ?? ""), "\(requests.first?.body ?? "")")
        #expect(requests.first?.header("Priority") == "3")
        #expect(requests.first?.header("Tags") == "mute,smoke_alarm")
        let listening = try #require(requests.first { $0.header("Title") == "kitchen: Smoke alarm listening again" })
        #expect(listening.body.hasPrefix("Smoke alarm listening again in kitchen since "))
        #expect(listening.body.hasSuffix("\nits 1 min mute ended"))
        #expect(listening.header("Priority") == "2")
    }

    @Test("earshot mute and unmute: one line each with exit 0 (muted until, renewed, unmuted, was not muted), earshot status names the end; an unknown group names the watched ones (64), a bad --minutes is a usage error (64), a user not in control_users gets the daemon's refusal (77)",
          .needsEarshotdBuilt, .needsEarshotBuilt)
    func commands() throws {
        let scratch = try StopAndPathTests.Scratch()
        defer { scratch.remove() }
        let config = scratch.path("earshotd.conf")
        let socket = scratch.path("e.sock")
        try "[detection]\nwatch = smoke_alarm | baby_cry\nalarm_mute_minutes = 20\n[output]\nsocket = \(socket)\njournal = false\n[history]\nenabled = false\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(["--config", config, "--foreground", "--input", "-"], standardInput: true)
        let control = try UnmuteTests.Control(socket: socket)
        let directory = URL(fileURLWithPath: scratch.path(""))
        func earshot(_ arguments: [String]) throws -> EarshotCLI.Outcome {
            try #require(try EarshotCLI.run(arguments + ["--socket", socket], in: directory, timeout: 30))
        }
        /// The end the daemon holds for `group`, as the CLI prints it.
        func end(_ group: String) throws -> String {
            let status = try control.ask(#"{"status":true}"#)
            let until = try #require(((status["muted_until"] as? [String: String])?[group]).flatMap(EventTextFormat.date(fromTimestamp:)), "\(status)")
            return MuteText.clock(until, now: Date())
        }

        let muted = try earshot(["mute", "smoke_alarm"])
        #expect(muted.status == 0, "\(muted.standardError)")
        #expect(muted.outputLines == ["smoke_alarm muted until \(try end("smoke_alarm")) (20 min)"])
        let renewed = try earshot(["mute", "smoke_alarm", "--minutes", "90"])
        #expect(renewed.outputLines == ["smoke_alarm muted until \(try end("smoke_alarm")) (90 min, renewed)"])
        let baby = try earshot(["mute", "--minutes=1440", "baby_cry"])
        #expect(baby.outputLines == ["baby_cry muted until \(try end("baby_cry")) (24 h)"])
        #expect(try end("baby_cry").hasSuffix(" tomorrow"))
        let status = try earshot(["status"])
        #expect(status.outputLines.contains("muted: baby_cry until \(try end("baby_cry")), smoke_alarm until \(try end("smoke_alarm")) (no events until then)"), "\(status.outputLines)")
        let json = try earshot(["unmute", "baby_cry", "--json"])
        #expect(json.outputLines == [#"{"type":"mute","id":1,"group":"baby_cry","muted":false,"changed":true}"#])
        let unmuted = try earshot(["unmute", "smoke_alarm"])
        #expect((unmuted.status, unmuted.outputLines) == (0, ["smoke_alarm unmuted"]))
        let again = try earshot(["unmute", "smoke_alarm"])
        #expect((again.status, again.outputLines) == (0, ["smoke_alarm was not muted"]))

        let unknown = try earshot(["mute", "dog_bark"])
        #expect((unknown.status, unknown.standardOutput) == (64, ""))
        #expect(unknown.errorLines == [#"earshot: mute: "dog_bark" is not a watched group (watched: smoke_alarm, baby_cry)"#])
        let zero = try earshot(["mute", "smoke_alarm", "--minutes", "0"])
        #expect(zero.status == 64)
        #expect(zero.errorLines == [#"earshot: --minutes must be a whole number in [1, 1440] minutes, not "0""#])
        let two = try earshot(["unmute", "smoke_alarm", "baby_cry"])
        #expect(two.status == 64)
        #expect(two.errorLines == [#"earshot: unmute takes one GROUP, got "smoke_alarm" and "baby_cry""#])
        let none = try earshot(["mute"])
        #expect(none.status == 64)
        #expect(none.errorLines == ["earshot: mute needs a GROUP (earshot status lists the watched groups) (\(MuteEndTests.muteUsage))"])
        #expect(try control.ask(#"{"status":true}"#)["muted"] as? [String] == [])
        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 15) == 0)

        // Root is not a control user of this daemon.
        try "[detection]\nwatch = smoke_alarm | baby_cry\n[output]\nsocket = \(socket)\njournal = false\ncontrol_users = 4242\n[history]\nenabled = false\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        let strict = try DaemonProcess(["--config", config, "--foreground", "--input", "-"], standardInput: true)
        _ = try UnmuteTests.Control(socket: socket)
        let refused = try earshot(["mute", "smoke_alarm"])
        #expect(refused.status == 77)
        #expect(refused.errorLines == ["earshot: mute is refused: uid \(geteuid()) may not change the daemon's state (control users: uid 4242; add the user to [output] control_users and restart earshotd)"])
        strict.signal(SIGTERM)
        #expect(strict.wait(seconds: 15) == 0)
    }

    static let muteUsage = "usage: earshot mute GROUP [--minutes N] [--socket PATH | --config FILE] [--json]"

    @Test("earshot help lists mute and unmute, each on a line of its own (help2man); their --help", .needsEarshotBuilt)
    func help() throws {
        let lines = try CommandLineTests.run(["help"]).outputLines
        let at = try #require(lines.firstIndex(of: "  mute GROUP [--minutes N] [--socket PATH | --config FILE] [--json]"), "\(lines)")
        #expect(Array(lines[at..<(at + 4)]) == [
            "  mute GROUP [--minutes N] [--socket PATH | --config FILE] [--json]",
            "                                  mute a group's events for a while (smoke, CO, fire: 15 min; others: 8 h)",
            "  unmute GROUP [--socket PATH | --config FILE] [--json]",
            "                                  unmute a group muted at run time",
        ])
        #expect(try CommandLineTests.run(["mute", "--help"]).outputLines.first == Self.muteUsage)
    }
}
