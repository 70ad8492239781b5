import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotModel
import EarshotOutputs
import EarshotService
import EarshotTools

/// The 521 display names of `Models/yamnet_class_map.csv` (index,mid,display_name; names with commas are quoted).
enum ClassMapFixture {
    static let labels: [String] = {
        let url = TestPaths.packageRoot.appendingPathComponent("Models/yamnet_class_map.csv")
        guard let text = try? String(contentsOf: url, encoding: .utf8) else { return [] }
        var labels: [String] = []
        for line in text.split(whereSeparator: \.isNewline).dropFirst() {
            // Third field: after the second comma; quoted when it holds commas.
            let fields = line.split(separator: ",", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            var name = String(fields[2])
            if name.hasPrefix("\"") && name.hasSuffix("\"") && name.count >= 2 {
                name = String(name.dropFirst().dropLast()).replacingOccurrences(of: "\"\"", with: "\"")
            }
            labels.append(name)
        }
        return labels
    }()

    /// The labels the daemon resolves groups against with the default watch list: YAMNet's 521, then the built-in
    /// baby-cry head's, which it loads because the `baby_cry` preset names it.
    static let daemonLabels = labels + [LabelGroup.builtInBabyCryLabel]
}

/// Parses `text` and returns the error's message (or nil when it parses).
private func parseError(_ text: String, source: String = "test.conf") -> EarshotError? {
    do {
        _ = try DaemonConfiguration.parse(text, source: source)
        return nil
    } catch {
        return error
    }
}

@Suite("Config: configuration file")
struct ConfigFileTests {
    static let shippedPath = TestPaths.packageRoot.appendingPathComponent("config/earshotd.conf").path

    @Test("the class map has 521 labels")
    func classMap() {
        #expect(ClassMapFixture.labels.count == 521)
        #expect(ClassMapFixture.labels[393] == "Smoke detector, smoke alarm")
    }

    @Test("the shipped config/earshotd.conf, as shipped, is the built-in defaults")
    func shippedFileIsDefaults() throws {
        let configuration = try DaemonConfiguration.parse(fileAt: Self.shippedPath, required: true)
        #expect(configuration == DaemonConfiguration())
    }

    @Test("uncommenting every setting of the shipped file still gives the defaults, and every key is documented")
    func shippedFileDocumentsEveryKey() throws {
        let text = try String(contentsOfFile: Self.shippedPath, encoding: .utf8)
        // "#key = value" and "#[section]" are settings; "# text" (with a space) is prose.
        let uncommented = text.split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
            guard line.hasPrefix("#"), let next = line.dropFirst().first, next == "[" || next.isLetter else {
                return String(line)
            }
            return String(line.dropFirst())
        }.joined(separator: "\n")
        let configuration = try DaemonConfiguration.parse(uncommented, source: "uncommented.conf")

        var groupsAside = configuration
        groupsAside.detection.groups = [:]
        #expect(groupsAside == DaemonConfiguration())

        // Every key of every section appears, uncommented, exactly once.
        let entries = INIFile(bytes: Array(uncommented.utf8)).entries
        var documented: [String: [String]] = [:]
        for entry in entries { documented[entry.section, default: []].append(entry.key) }
        for (section, keys) in DaemonConfiguration.sectionKeys {
            #expect(documented[section] == keys, "section [\(section)]")
        }
        // Every preset is documented with every group key it takes and exactly its values (the level-driven
        // loud group takes level_dbfs and min_seconds instead of the classifier's keys); snoring has no section:
        // the snore detector decides it, with the [sleep] keys checked above.
        #expect(documented["group.snoring"] == nil)
        let classifierPresets = LabelGroup.presets.filter { $0.key != SnoreDetector.groupName }
        for (name, preset) in classifierPresets {
            let excluded = preset.levelThresholdDBFS != nil
                ? DaemonConfiguration.classifierOnlyGroupKeys : DaemonConfiguration.levelOnlyGroupKeys
            let keys = DaemonConfiguration.groupKeys.filter { !excluded.contains($0) }
            #expect(documented["group.\(name)"] == keys, "section [group.\(name)]")
            #expect(configuration.mergedGroup(named: name) == preset, "values of [group.\(name)]")
        }
        #expect(Set(configuration.detection.groups.keys) == Set(classifierPresets.keys))
        let watched = try configuration.resolvedGroups(classLabels: ClassMapFixture.daemonLabels)
        #expect(watched == LabelGroup.defaultWatchList.compactMap { LabelGroup.presets[$0] })
    }

    @Test("the shipped file's comment on [output] control_users names every command it governs (trial 13 D5)")
    func controlUsersCommentNamesEveryCommand() throws {
        let text = try String(contentsOfFile: Self.shippedPath, encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let key = try #require(lines.firstIndex(of: "#control_users ="))
        var start = key
        while start > 0, lines[start - 1].hasPrefix("# ") { start -= 1 }
        let words = Set(lines[start..<key].joined(separator: " ")
            .split { !($0.isLetter || $0 == "_") }.map(String.init))
        let commands = EventServer.Configuration().controlCommands
        #expect(commands == ["sleep_start", "sleep_stop", "mute", "unmute", "test"])
        for command in commands.sorted() { #expect(words.contains(command), "\(command)") }
    }

    @Test("baby_cry: the built-in head is loaded when a group names it; other classes drop the YAMNet support check")
    func builtInBabyCryHead() throws {
        let directory = try ModelLocator.builtInDirectory()
        let head = directory.appendingPathComponent("builtin_baby_cry.earshot").path
        #expect(FileManager.default.fileExists(atPath: head))
        #expect(try DaemonConfiguration().headModelFiles() == [head])
        let custom = try DaemonConfiguration.parse("[models]\nfiles = /srv/kettle.earshot\n", source: "t.conf")
        #expect(try custom.headModelFiles() == [head, "/srv/kettle.earshot"])
        let noCry = try DaemonConfiguration.parse(
            "[detection]\nwatch = smoke_alarm\n[models]\nfiles = /srv/kettle.earshot\n", source: "t.conf")
        #expect(try noCry.headModelFiles() == ["/srv/kettle.earshot"])

        let preset = try #require(LabelGroup.presets["baby_cry"])
        #expect(preset.classLabels == ["builtin_baby_cry:baby_cry"] && preset.threshold == 0.95)
        let same = try DaemonConfiguration.parse(
            "[group.baby_cry]\nclasses = builtin_baby_cry:baby_cry\nthreshold = 0.6\n", source: "t.conf")
        #expect(same.mergedGroup(named: "baby_cry")?.support == preset.support)
        let before = try DaemonConfiguration.parse(
            "[group.baby_cry]\nclasses = Baby cry, infant cry\nthreshold = 0.3\n", source: "t.conf")
        let merged = try #require(before.mergedGroup(named: "baby_cry"))
        #expect(merged.support == nil && merged.classLabels == ["Baby cry, infant cry"] && merged.threshold == 0.3)
        #expect(try before.headModelFiles().isEmpty)
    }

    @Test("the defaults resolve to the preset groups of the default watch list")
    func defaultsResolve() throws {
        let groups = try DaemonConfiguration().resolvedGroups(classLabels: ClassMapFixture.daemonLabels)
        #expect(groups.map(\.name) == ["smoke_alarm", "fire_alarm", "co_alarm", "baby_cry", "glass_break"])
        #expect(groups[0].classLabels == ["Smoke detector, smoke alarm"])
        #expect(groups[2].threshold == 0.4)
        #expect(groups[2].holdSeconds == 6)
    }

    @Test("every preset's classes are labels of the built-in classifier and its heads; support classes are YAMNet's")
    func presetsUseKnownLabels() {
        let labels = Set(ClassMapFixture.daemonLabels)
        for preset in LabelGroup.presets.values {
            for label in preset.classLabels {
                #expect(labels.contains(label), "\(preset.name): \(label)")
            }
            for label in (preset.support?.classLabels ?? []) + (preset.support?.vetoClassLabels ?? []) {
                #expect(ClassMapFixture.labels.contains(label), "\(preset.name) support: \(label)")
            }
        }
    }

    @Test("every setting is read, with its unit")
    func readsEverySetting() throws {
        let text = """
            [capture]
            device = plughw:CARD=Mic,DEV=0
            input = -
            input_rate = 48000
            [analysis]
            window = 1.92
            overlap = 0.75
            gate_dbfs = -60.5
            silence_minutes = 0
            [detection]
            watch = snoring, dog_bark
            [output]
            socket = /tmp/e.sock
            socket_mode = 0600
            client_queue_kib = 64
            max_clients = 8
            journal = off
            [daemon]
            watchdog = no
            """
        let configuration = try DaemonConfiguration.parse(text, source: "t.conf")
        var expected = DaemonConfiguration()
        expected.capture.device = "plughw:CARD=Mic,DEV=0"
        expected.capture.input = .standardInput
        expected.capture.inputSampleRate = 48_000
        expected.analysis.windowDuration = 1.92
        expected.analysis.overlapFactor = 0.75
        expected.analysis.gateThresholdDBFS = -60.5
        expected.analysis.silenceMinutes = 0
        expected.detection.watch = ["snoring", "dog_bark"]
        expected.output.socketPath = "/tmp/e.sock"
        expected.output.socketMode = 0o600
        expected.output.clientQueueKiB = 64
        expected.output.maxClients = 8
        expected.output.journal = false
        expected.daemon.watchdog = false
        #expect(configuration == expected)
        #expect(configuration.analysis.hopSeconds == 1.92 * 0.25)
        #expect(configuration.output.clientQueueBytes == 65_536)

        let file = try DaemonConfiguration.parse("[capture]\ninput = /srv/a b.flac\n", source: "t.conf")
        #expect(file.capture.input == .file(path: "/srv/a b.flac"))
    }

    struct BadValue: Sendable, CustomTestStringConvertible {
        let text: String
        let message: String
        var testDescription: String { message }
    }

    static let badValues: [BadValue] = [
        .init(text: "[analysis]\noverlap = 1.5", message: "test.conf:2: [analysis] overlap = 1.5: must be in [0, 1)"),
        .init(text: "[analysis]\noverlap = 1", message: "test.conf:2: [analysis] overlap = 1: must be in [0, 1)"),
        .init(text: "[analysis]\noverlap = nan", message: "test.conf:2: [analysis] overlap = nan: must be in [0, 1)"),
        .init(text: "[analysis]\nwindow = 0.5", message: "test.conf:2: [analysis] window = 0.5: must be in [0.96, 10] seconds"),
        .init(text: "[analysis]\ngate_dbfs = loud",
              message: "test.conf:2: [analysis] gate_dbfs = loud: must be in [-120, 0] dBFS"),
        .init(text: "[analysis]\nsilence_minutes = -1",
              message: "test.conf:2: [analysis] silence_minutes = -1: must be in [0, 1440] minutes (0 turns the event off)"),
        .init(text: "[capture]\ninput_rate = 44.1k",
              message: "test.conf:2: [capture] input_rate = 44.1k: must be a whole number in [8000, 192000] Hz"),
        .init(text: "[capture]\ndevice =",
              message: "test.conf:2: [capture] device = : must be an ALSA PCM name such as default, hw:1,0 or plughw:CARD=Mic,DEV=0"),
        .init(text: "[output]\nsocket_mode = 0999",
              message: "test.conf:2: [output] socket_mode = 0999: must be an octal mode from 0000 to 0777, e.g. 0660"),
        .init(text: "[output]\nsocket_mode = 1777",
              message: "test.conf:2: [output] socket_mode = 1777: must be an octal mode from 0000 to 0777, e.g. 0660"),
        .init(text: "[output]\nclient_queue_kib = 8",
              message: "test.conf:2: [output] client_queue_kib = 8: must be a whole number in [16, 65536] KiB"),
        .init(text: "[output]\nmax_clients = 0",
              message: "test.conf:2: [output] max_clients = 0: must be a whole number in [1, 4096]"),
        .init(text: "[output]\nmax_clients = 4097",
              message: "test.conf:2: [output] max_clients = 4097: must be a whole number in [1, 4096]"),
        .init(text: "[output]\njournal = maybe",
              message: "test.conf:2: [output] journal = maybe: must be true or false (or yes/no, on/off, 1/0)"),
        .init(text: "[output]\nsocket = /run/" + String(repeating: "x", count: 103),
              message: "test.conf:2: [output] socket = /run/\(String(repeating: "x", count: 103)): must be a path of 1 to 107 bytes (the limit of a Unix socket address)"),
        .init(text: "[daemon]\nwatchdog = 2",
              message: "test.conf:2: [daemon] watchdog = 2: must be true or false (or yes/no, on/off, 1/0)"),
        .init(text: "[group.baby_cry]\nthreshold = 1.2",
              message: "test.conf:2: [group.baby_cry] threshold = 1.2: must be in [0, 1]"),
        .init(text: "[group.baby_cry]\nonset_of = 0",
              message: "test.conf:2: [group.baby_cry] onset_of = 0: must be a whole number in [1, 100]"),
        .init(text: "[group.baby_cry]\nhold_seconds = -2",
              message: "test.conf:2: [group.baby_cry] hold_seconds = -2: must be in [0, 3600] seconds"),
        .init(text: "[group.baby_cry]\nmin_interval_seconds = 1e9",
              message: "test.conf:2: [group.baby_cry] min_interval_seconds = 1e9: must be in [0, 86400] seconds"),
    ]

    @Test("a bad value names the file, line, section, key, value and what is allowed; exit status 78",
          arguments: badValues)
    func badValue(_ bad: BadValue) {
        let error = parseError(bad.text)
        #expect(error?.message == bad.message)
        #expect(error?.code == .config)
        #expect(error?.exitStatus == 78)
    }

    static let structureErrors: [BadValue] = [
        .init(text: "[analysis]\nwindw = 1",
              message: "test.conf:2: [analysis] windw: unknown key (did you mean window? keys: window, overlap, gate_dbfs, silence_minutes)"),
        .init(text: "[output]\ncolour = red",
              message: "test.conf:2: [output] colour: unknown key (keys: socket, socket_mode, client_queue_kib, max_clients, max_clients_per_user, stalled_client_seconds, control_users, journal)"),
        .init(text: "[analysys]\nwindow = 1",
              message: "test.conf:2: [analysys]: unknown section (did you mean [analysis]? sections: capture, analysis, models, detection, output, daemon, alarms, history, clips, sleep, mqtt, metrics, notify, group.NAME)"),
        .init(text: "[groups.kettle]\nthreshold = 1",
              message: "test.conf:2: [groups.kettle]: unknown section (sections: capture, analysis, models, detection, output, daemon, alarms, history, clips, sleep, mqtt, metrics, notify, group.NAME)"),
        .init(text: "device = hw:0\n[capture]",
              message: "test.conf:1: device: key outside a section; put it under its [section] header"),
        .init(text: "[analysis]\nwindow = 1\n\n[capture]\n[analysis]\nwindow = 2",
              message: "test.conf:6: [analysis] window: set twice (also on line 2); keep one"),
        .init(text: "[analysis]\nwindow 1",
              message: "test.conf:2: expected \"key = value\", \"[section]\" or a comment, found \"window 1\""),
        .init(text: "[analysis\nwindow = 1",
              message: "test.conf:1: expected \"key = value\", \"[section]\" or a comment, found \"[analysis\""),
        .init(text: "fLaC\u{01}\u{02}\u{FFFD}\u{FFFD}" + String(repeating: "x", count: 70),
              message: "test.conf:1: expected \"key = value\", \"[section]\" or a comment, found \"fLaC\\x01\\x02??" + String(repeating: "x", count: 52) + "...\" (is it a text file?)"),
        .init(text: "[analysis]\nwindow = 1\n  overlap 0.2",
              message: "test.conf:3: [analysis] window: the indented line \"overlap 0.2\" continues the value of window, which takes one line; remove the indentation"),
        .init(text: "[group.kettle]\nclasses = Whistle\n  threshold = 0.4",
              message: "test.conf:3: [group.kettle] classes: the indented line \"threshold = 0.4\" is read as more of the classes list; remove the indentation to start a new key"),
        .init(text: "[group.Kettle]\nthreshold = 0.4",
              message: "test.conf:2: [group.Kettle]: a group name is 1 to 64 lowercase letters, digits and _ (e.g. [group.kettle])"),
        .init(text: "[group.kettle]\nclasses = Whistle",
              message: "test.conf:2: [group.kettle]: a new group needs threshold (presets, which need neither: baby_cry, co_alarm, dog_bark, doorbell_knock, fire_alarm, glass_break, loud, smoke_alarm, snoring, speech)"),
        .init(text: "[group.kettle]\nhold_seconds = 5",
              message: "test.conf:2: [group.kettle]: a new group needs classes and threshold (presets, which need neither: baby_cry, co_alarm, dog_bark, doorbell_knock, fire_alarm, glass_break, loud, smoke_alarm, snoring, speech)"),
        .init(text: "[group.kettle]\nclasses = |\nthreshold = 0.4",
              message: "test.conf:2: [group.kettle] classes: must name at least one class label (separate labels with |)"),
        .init(text: "[group.dog_bark]\nonset_windows = 2",
              message: "test.conf:2: [group.dog_bark] onset_windows = 2: onset_windows (2) must be at most onset_of (1)"),
        .init(text: "[group.smoke_alarm]\nonset_of = 1",
              message: "test.conf:2: [group.smoke_alarm] onset_of = 1: onset_windows (2) must be at most onset_of (1)"),
        .init(text: "[detection]\nwatch = smoke_alarm | smoke_alrm",
              message: "test.conf:2: [detection] watch: \"smoke_alrm\" is not a group (did you mean smoke_alarm? groups: baby_cry, co_alarm, dog_bark, doorbell_knock, fire_alarm, glass_break, loud, smoke_alarm, snoring, speech; a new group needs a [group.smoke_alrm] section with classes and threshold)"),
        .init(text: "[detection]\nwatch = BABY_CRY",
              message: "test.conf:2: [detection] watch: \"BABY_CRY\" is not a group (did you mean baby_cry? groups: baby_cry, co_alarm, dog_bark, doorbell_knock, fire_alarm, glass_break, loud, smoke_alarm, snoring, speech; a group name is 1 to 64 lowercase letters, digits and _)"),
        .init(text: "[detection]\nwatch = |",
              message: "test.conf:2: [detection] watch: must name at least one group (separate names with |, commas or spaces)"),
        .init(text: "[group.snoring]\nthreshold = 0.5",
              message: "test.conf:2: [group.snoring] threshold: the snoring group is decided by the snore detector, not by class scores (remove [group.snoring]; tune it in [sleep] with threshold, rhythm_threshold or model)"),
        .init(text: "[capture]\ndevice = " + String(repeating: "x", count: 200) + "\n",
              message: "test.conf:2: line longer than 198 bytes; split a long list over indented continuation lines"),
    ]

    @Test("unknown sections and keys, keys set twice, syntax and group errors name the line", arguments: structureErrors)
    func structureError(_ bad: BadValue) {
        let error = parseError(bad.text)
        #expect(error?.message == bad.message)
        #expect(error?.code == .config)
    }

    @Test("the line limit the shipped file and the error state, 198 bytes without the line end, is the real one, for \\n and \\r\\n ends")
    func lineLimit() throws {
        for end in ["\n", "\r\n"] {
            let prefix = "device = "
            let longest = prefix + String(repeating: "x", count: 198 - prefix.utf8.count)
            #expect(longest.utf8.count == 198)
            let parsed = try DaemonConfiguration.parse("[capture]" + end + longest + end, source: "test.conf")
            #expect(parsed.capture.device == String(repeating: "x", count: 189))
            let error = parseError("[capture]" + end + longest + "x" + end + "[bogus]" + end)
            #expect(error?.message == "test.conf:2: line longer than 198 bytes; split a long list over indented continuation lines")
        }
        let shipped = try String(contentsOfFile: ConfigFileTests.shippedPath, encoding: .utf8)
        #expect(shipped.contains("A line may hold at most 198 bytes."))
    }

    @Test("the first error in the file is the one reported")
    func firstErrorWins() {
        #expect(parseError("[analysis]\noverlap = 2\nbad line\n")?.message
            == "test.conf:2: [analysis] overlap = 2: must be in [0, 1)")
        #expect(parseError("[analysis]\nbad line\noverlap = 2\n")?.message
            == "test.conf:2: expected \"key = value\", \"[section]\" or a comment, found \"bad line\"")
    }

    @Test("class lists use | because AudioSet names contain commas; lists continue on indented lines")
    func classSeparator() throws {
        let text = """
            [detection]
            watch = smoke_alarm | alarms
            [group.smoke_alarm]
            classes = Smoke detector, smoke alarm | Fire alarm
            [group.alarms]
            classes = Alarm | Beep, bleep |
                Buzzer | Siren ; inline comment after " ;"
                Civil defense siren
            threshold = 0.25
            """
        let configuration = try DaemonConfiguration.parse(text, source: "t.conf")
        #expect(configuration.detection.groups["smoke_alarm"]?.classLabels == ["Smoke detector, smoke alarm", "Fire alarm"])
        #expect(configuration.detection.groups["alarms"]?.classLabels
            == ["Alarm", "Beep, bleep", "Buzzer", "Siren", "Civil defense siren"])
        let groups = try configuration.resolvedGroups(classLabels: ClassMapFixture.labels)
        #expect(groups == [
            LabelGroup(name: "smoke_alarm", classLabels: ["Smoke detector, smoke alarm", "Fire alarm"], threshold: 0.3,
                       holdSeconds: 3),
            LabelGroup(name: "alarms", classLabels: ["Alarm", "Beep, bleep", "Buzzer", "Siren", "Civil defense siren"],
                       threshold: 0.25),
        ])
    }

    @Test("a socket path may hold 107 bytes, the room in sun_path")
    func socketPathLimit() throws {
        let path = "/run/" + String(repeating: "x", count: 102)
        #expect(try DaemonConfiguration.parse("[output]\nsocket = \(path)\n", source: "t.conf").output.socketPath == path)
    }

    @Test("comments: ';' and '#' lines, ' ;' after a value; '#' after a value is part of it")
    func comments() throws {
        let configuration = try DaemonConfiguration.parse(
            "; comment\n# comment\n[capture]\ndevice = hw:1,0 ; the USB microphone\n[output]\nsocket = /tmp/a#b.sock\n",
            source: "t.conf")
        #expect(configuration.capture.device == "hw:1,0")
        #expect(configuration.output.socketPath == "/tmp/a#b.sock")
    }

    @Test("an unknown class names the group, the class and the nearest label; unwatched groups are checked too")
    func unknownClass() throws {
        let text = """
            [detection]
            watch = smoke_alarm

            [group.kettle]
            classes = Whistling | kettle whistle
            threshold = 0.4
            """
        let configuration = try DaemonConfiguration.parse(text, source: "/etc/earshot/earshotd.conf")
        #expect(throws: EarshotError(.config, "/etc/earshot/earshotd.conf:5: [group.kettle] classes: unknown class \"kettle whistle\" (nearest: \"Steam whistle\"; `earshot classes` lists the 521 built-in classes)")) {
            try configuration.resolvedGroups(classLabels: ClassMapFixture.labels)
        }

        let synonym = try DaemonConfiguration.parse("[group.smoke_alarm]\nclasses = Smoke alarm\n", source: "t.conf")
        #expect(throws: EarshotError(.config, "t.conf:2: [group.smoke_alarm] classes: unknown class \"Smoke alarm\" (nearest: \"Smoke detector, smoke alarm\"; `earshot classes` lists the 521 built-in classes)")) {
            try synonym.resolvedGroups(classLabels: ClassMapFixture.labels)
        }

        // A classifier whose labels lack a watched preset's class (a custom model).
        #expect(throws: EarshotError(.config, "group smoke_alarm: preset class \"Smoke detector, smoke alarm\" is not a label of this classifier (nearest: \"Smoke\"; `earshot classes` lists the 2 built-in classes; set classes in [group.smoke_alarm])")) {
            try DaemonConfiguration().resolvedGroups(classLabels: ["Smoke", "Speech"])
        }
    }

    @Test("CRLF line ends and a UTF-8 byte order mark are read")
    func crlfAndBOM() throws {
        let configuration = try DaemonConfiguration.parse(
            "\u{FEFF}[analysis]\r\nwindow = 1.5\r\n[capture]\r\ndevice = hw:2\r\n", source: "t.conf")
        #expect(configuration.analysis.windowDuration == 1.5)
        #expect(configuration.capture.device == "hw:2")
    }

    @Test("files: the default path may be missing, a named file may not; line numbers carry the path")
    func files() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-config-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let missing = directory.appendingPathComponent("missing.conf").path

        #expect(try DaemonConfiguration.parse(fileAt: missing, required: false) == DaemonConfiguration())
        #expect(throws: EarshotError(.config, "\(missing): cannot read the configuration file: No such file or directory (check the --config path, or omit --config to run with the built-in defaults)", cause: "No such file or directory")) {
            try DaemonConfiguration.load(path: missing)
        }
        #expect(throws: EarshotError(.config, "\(directory.path): cannot read the configuration file: Is a directory (name the file, not its directory)", cause: "Is a directory")) {
            try DaemonConfiguration.parse(fileAt: directory.path, required: false)
        }

        let file = directory.appendingPathComponent("earshotd.conf")
        try "[analysis]\n\n# comment\noverlap = 1.5\n".write(to: file, atomically: true, encoding: .utf8)
        #expect(throws: EarshotError(.config, "\(file.path):4: [analysis] overlap = 1.5: must be in [0, 1)")) {
            try DaemonConfiguration.load(path: file.path)
        }

        try "[analysis]\noverlap = 0.25\n".write(to: file, atomically: true, encoding: .utf8)
        let loaded = try DaemonConfiguration.load(path: file.path, overrides: .init(gateThresholdDBFS: -30))
        #expect(loaded.analysis.overlapFactor == 0.25)
        #expect(loaded.analysis.gateThresholdDBFS == -30)

        // Window and overlap leaving windows under 5 ms apart: refused at load (and so by --check-config), with
        // the file, or as a usage error when a flag set one of them.
        try "[analysis]\noverlap = 0.999\n".write(to: file, atomically: true, encoding: .utf8)
        let tooClose = "overlap 0.999 on a 0.96 s window leaves windows 0.96 ms apart, under the 10 ms step windows start on: use an overlap of at most 0.994 for this window"
        #expect(throws: EarshotError(.config, "\(file.path): [analysis] window and overlap: \(tooClose)")) {
            try DaemonConfiguration.load(path: file.path)
        }
        #expect(throws: EarshotError(.usage, "--window/--overlap: \(tooClose)")) {
            try DaemonConfiguration.load(path: file.path, overrides: .init(windowDuration: 0.96))
        }
    }

    @Test("files: an unreadable configuration file names the fix", .notRoot)
    func unreadableFile() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-config-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("earshotd.conf")
        try "[analysis]\n".write(to: file, atomically: true, encoding: .utf8)
        #expect(chmod(file.path, 0) == 0)
        #expect(throws: EarshotError(.config, "\(file.path): cannot read the configuration file: Permission denied (make it readable by the daemon's user, e.g. chmod 644)", cause: "Permission denied")) {
            try DaemonConfiguration.parse(fileAt: file.path, required: false)
        }
    }

    @Test("overrides win over the file; --device clears the file's input; --watch names are checked")
    func overrides() throws {
        let file = try DaemonConfiguration.parse(
            "[capture]\ninput = /srv/test.wav\n[group.kettle]\nclasses = Whistling\nthreshold = 0.4\n", source: "t.conf")
        let applied = try file.applying(.init(device: "hw:1,0", socketPath: "/tmp/s.sock", windowDuration: 2,
                                              overlapFactor: 0, watch: ["kettle", "smoke_alarm", "kettle"],
                                              journal: false))
        #expect(applied.capture.device == "hw:1,0")
        #expect(applied.capture.input == nil)
        #expect(applied.output.socketPath == "/tmp/s.sock")
        #expect(applied.analysis.windowDuration == 2)
        #expect(applied.analysis.overlapFactor == 0)
        #expect(applied.detection.watch == ["kettle", "smoke_alarm"])
        #expect(applied.output.journal == false)
        #expect(try applied.resolvedGroups(classLabels: ClassMapFixture.labels).map(\.name) == ["kettle", "smoke_alarm"])

        #expect(throws: EarshotError(.usage, "--watch kettel: \"kettel\" is not a group (did you mean kettle? groups: baby_cry, co_alarm, dog_bark, doorbell_knock, fire_alarm, glass_break, kettle, loud, smoke_alarm, snoring, speech; a new group needs a [group.kettel] section with classes and threshold)")) {
            try file.applying(.init(watch: ["kettel"]))
        }
        #expect(throws: EarshotError(.usage, "--overlap 1.5: must be in [0, 1)")) {
            try file.applying(.init(overlapFactor: 1.5))
        }
        #expect(throws: EarshotError(.usage, "--window 0.5: must be in [0.96, 10] seconds")) {
            try file.applying(.init(windowDuration: 0.5))
        }
    }

    @Test("--check-config: one OK line naming the watched groups; an input file that cannot be used names its key")
    func checkConfiguration() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let config = directory.appendingPathComponent("earshotd.conf").path
        func check(_ text: String, _ arguments: [String] = []) throws(EarshotError) -> String {
            try? text.write(toFile: config, atomically: true, encoding: .utf8)
            return try DaemonConfiguration.check(commandLine: DaemonCommandLine.parse(["--config", config] + arguments))
        }
        #expect(try check("[detection]\nwatch = smoke_alarm | baby_cry\n") == "configuration OK (watching smoke_alarm, baby_cry)")

        let missing = AudioTestFiles.error { () throws(EarshotError) in try check("[capture]\ninput = /nonexistent/a.wav\n") }
        #expect(missing == EarshotError(.noInput, "\(config):2: [capture] input: /nonexistent/a.wav: no such file (check the path)", cause: "No such file or directory"))
        #expect(missing?.exitStatus == 66)
        let flag = AudioTestFiles.error { () throws(EarshotError) in try check("", ["--input", "/nonexistent/b.wav"]) }
        #expect(flag?.message == "--input: /nonexistent/b.wav: no such file (check the path)")
        #expect(flag?.exitStatus == 66)

        let notes = directory.appendingPathComponent("notes.wav").path
        try "not audio\n".write(toFile: notes, atomically: true, encoding: .utf8)
        let notAudio = AudioTestFiles.error { () throws(EarshotError) in try check("\n[capture]\ninput = \(notes)\n") }
        #expect(notAudio?.message == "\(config):3: [capture] input: \(notes): not an audio file libsndfile can read (Format not recognised; use WAV, FLAC, Ogg or MP3)")
        #expect(notAudio?.exitStatus == 65)

        let tone = directory.appendingPathComponent("tone.wav")
        try AnalysisTestSupport.writeFloatWAV([0, 0.5, -0.5, 0], sampleRate: 16_000, to: tone)
        #expect(try check("[capture]\ninput = \(tone.path)\n[detection]\nwatch = glass_break\n")
                == "configuration OK (watching glass_break)")
        #expect(try check("[capture]\ninput = -\n[detection]\nwatch = glass_break\n") == "configuration OK (watching glass_break)")

        // --fallback-input is checked as --input is: missing, a directory, not audio; a sound file passes.
        let fallbackCases: [(path: String, message: String, status: Int32)] = [
            ("/nonexistent/c.wav", "--fallback-input: /nonexistent/c.wav: no such file (check the path)", 66),
            (directory.path, "--fallback-input: \(directory.path): is a directory, not an audio file (name the audio files inside it)", 66),
            (notes, "--fallback-input: \(notes): not an audio file libsndfile can read (Format not recognised; use WAV, FLAC, Ogg or MP3)", 65),
        ]
        for (path, message, status) in fallbackCases {
            let fallback = AudioTestFiles.error { () throws(EarshotError) in try check("", ["--fallback-input", path]) }
            #expect(fallback?.message == message)
            #expect(fallback?.exitStatus == status)
        }
        #expect(try check("[detection]\nwatch = glass_break\n", ["--fallback-input", tone.path]) == "configuration OK (watching glass_break)")

        // `[sleep] model` loads as at the daemon's start: a file that is not a head is refused, naming the line.
        let head = directory.appendingPathComponent("snoring.earshot").path
        try "hello\n".write(toFile: head, atomically: true, encoding: .utf8)
        let damaged = AudioTestFiles.error { () throws(EarshotError) in try check("[sleep]\nmodel = \(head)\n") }
        #expect(damaged?.message == "\(config):2: [sleep] model: head model \(head) is damaged: 6 bytes is too short for a safetensors file (copy it again, or train it again)")
        #expect(damaged?.exitStatus == 65)
    }

    @Test("earshotd --check-config without --config and without /etc/earshot/earshotd.conf says the built-in defaults apply",
          .needsEarshotdBuilt,
          .enabled(if: !FileManager.default.fileExists(atPath: DaemonConfiguration.defaultPath),
                   "/etc/earshot/earshotd.conf exists here (the package is installed), so the defaults are not what is checked"))
    func checkConfigDefaults() throws {
        let run = try #require(try EarshotdRun.run(["--check-config"]))
        #expect(run.status == 0)
        #expect(run.output == "earshotd: configuration OK (watching smoke_alarm, fire_alarm, co_alarm, baby_cry, glass_break); no /etc/earshot/earshotd.conf, so the built-in defaults\n")
    }

    @Test("earshotd --check-config prints one line on standard output, or the error on standard error", .needsEarshotdBuilt)
    func checkConfigCommand() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let config = directory.appendingPathComponent("earshotd.conf").path
        try "[detection]\nwatch = smoke_alarm, co_alarm\n".write(toFile: config, atomically: true, encoding: .utf8)
        func run(_ arguments: [String]) throws -> (status: Int32, output: String, error: String) {
            try #require(try EarshotdRun.run(arguments))
        }
        let ok = try run(["--check-config", "--config", config])
        #expect(ok.status == 0)
        #expect(ok.output == "earshotd: configuration OK (watching smoke_alarm, co_alarm)\n")
        #expect(ok.error.isEmpty)
        let missing = try run(["--check-config", "--config", config, "--input", "/nonexistent/x.flac"])
        #expect(missing.status == 66)
        #expect(missing.output.isEmpty)
        #expect(missing.error == "earshotd: --input: /nonexistent/x.flac: no such file (check the path)\n")
    }

    /// Audit 13 F2: each name the daemon's own MQTT entities use, and why.
    static let reservedGroupErrors: [(name: String, why: String)] = [
        ("capture", "the Capture problem sensor publishes on the MQTT topics capture/state and capture/attributes"),
        ("sleep", "the Sleep session switch uses the MQTT topics sleep/state, sleep/set and sleep/report"),
        ("notify", "the Notifications failing sensor publishes on the MQTT topics notify/state and notify/attributes"),
        ("test_alert", "the Test alert button sends on the MQTT topic test_alert/set, and test_alert is an event type of the Sound event entity"),
        ("alarm_chirp", "the alarm pattern detector's low-battery chirp events have this name, and their MQTT topic alarm_chirp/state is the Smoke alarm battery sensor"),
        ("capture_problem", "it is the Home Assistant object id of the Capture problem sensor"),
        ("notifications_failing", "it is the Home Assistant object id of the Notifications failing sensor"),
        ("smoke_alarm_battery", "it is the Home Assistant object id of the Smoke alarm battery sensor"),
    ]

    @Test("a [group.NAME] whose name the daemon's own MQTT entities use is refused at its first key's line, MQTT enabled or not",
          arguments: reservedGroupErrors.map(\.name))
    func reservedGroupName(_ name: String) throws {
        let why = try #require(Self.reservedGroupErrors.first { $0.name == name }?.why)
        #expect(LabelGroup.reservedNames[name] == why)
        let error = parseError("[detection]\nwatch = \(name)\n\n[group.\(name)]\nclasses = White noise\nthreshold = 0.3\n")
        #expect(error?.message == "test.conf:5: [group.\(name)]: the group name \(name) is reserved: \(why) (give the group another name, e.g. [group.\(name)_sound], and use that name in [detection] watch)")
        #expect(error?.code == .config)
        // A custom model's suggested group never takes one.
        #expect(HeadModelSet.suggestedGroupName(model: name, label: name) == "\(name)_custom")
    }

    @Test("the reserved names are every fixed name beside the groups in the MQTT tree and the discovery object ids")
    func reservedNamesCoverTheMQTTTree() {
        #expect(Set(LabelGroup.reservedNames.keys) == Set(Self.reservedGroupErrors.map(\.name)))
        let topics = MQTTTopics(base: "earshot/kitchen")
        // The daemon's own `P/NAME/...` topics.
        let own = [topics.captureState, topics.captureAttributes, topics.notifyState, topics.notifyAttributes, topics.sleepState,
                   topics.sleepReport, topics.command("sleep"), topics.command(TestAlert.type), topics.batteryLowState]
        let names = Set(own.map { String($0.dropFirst("earshot/kitchen/".count).split(separator: "/")[0]) })
        #expect(names == ["capture", "notify", "sleep", "test_alert", "alarm_chirp"])
        #expect(names.isSubset(of: LabelGroup.reservedNames.keys))
        // The discovery configs of the daemon's own binary sensors, whose object ids a group's binary sensor would take.
        let controls = ControlState(groups: [], eventGroups: [AlarmEvent.alarmChirp])
        let discovery = HomeAssistantDiscovery(discoveryPrefix: "homeassistant", node: "kitchen", topics: topics, notify: true)
        let ownSensors = discovery.configs(for: controls).map(\.topic)
            .filter { $0.hasPrefix("homeassistant/binary_sensor/") }
            .map { String($0.split(separator: "/")[3]) }
        #expect(Set(ownSensors) == ["capture_problem", "notifications_failing", "smoke_alarm_battery"])
        #expect(Set(ownSensors).isSubset(of: LabelGroup.reservedNames.keys))
    }

    @Test("earshotd refuses [group.sleep] at start and with --check-config: exit 78, one line with file:line, the name, why and the fix",
          .needsEarshotdBuilt)
    func reservedGroupNameStops() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let config = directory.appendingPathComponent("earshotd.conf").path
        try "[detection]\nwatch = sleep\n\n[group.sleep]\nclasses = Snoring\nthreshold = 0.3\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        let line = "earshotd: \(config):5: [group.sleep]: the group name sleep is reserved: the Sleep session switch uses the MQTT topics sleep/state, sleep/set and sleep/report (give the group another name, e.g. [group.sleep_sound], and use that name in [detection] watch)\n"
        for arguments in [["--check-config", "--config", config], ["--config", config, "--socket", directory.appendingPathComponent("s.sock").path]] {
            let run = try #require(try EarshotdRun.run(arguments))
            #expect(run.status == 78, "\(arguments)")
            #expect(run.output.isEmpty)
            #expect(run.error == line)
        }
    }
}
