import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs

extension DaemonConfiguration {
    /// The keys of each fixed section, in the order `config/earshotd.conf` documents them.
    package static let sectionKeys: KeyValuePairs<String, [String]> = [
        "capture": ["device", "input", "input_rate"],
        "analysis": ["window", "overlap", "gate_dbfs", "silence_minutes"],
        "models": ["files"],
        "detection": ["watch", "alarm_mute_minutes", "mute_minutes"],
        "output": [
            "socket", "socket_mode", "client_queue_kib", "max_clients", "max_clients_per_user", "stalled_client_seconds",
            "control_users", "journal",
        ],
        "daemon": ["watchdog"],
        "alarms": alarmKeys,
        "history": historyKeys,
        "clips": clipsKeys,
        "sleep": sleepKeys,
        "mqtt": MQTT.keys,
        "metrics": Metrics.keys,
        "notify": Notify.keys,
    ]
    /// The keys of a `[group.NAME]` section (`level_dbfs` and `min_seconds` in `[group.loud]` only, which takes
    /// neither `classes`, `threshold`, `onset_windows` nor `onset_of`).
    package static let groupKeys = [
        "classes", "threshold", "onset_windows", "onset_of", "hold_seconds", "min_interval_seconds", "level_dbfs",
        "min_seconds",
    ]
    /// The keys `[group.loud]` refuses (the level decides, not the classifier) and those only it takes.
    package static let classifierOnlyGroupKeys = ["classes", "threshold", "onset_windows", "onset_of"]
    package static let levelOnlyGroupKeys = ["level_dbfs", "min_seconds"]
    /// Prefix of group section names: `[group.NAME]`.
    package static let groupSectionPrefix = "group."
    /// Largest configuration file read, in bytes: far above any real one, small enough to refuse a wrong file fast.
    package static let maximumFileBytes = 1 << 20

    /// Reads the configuration: the file at `path` (or, when `path` is nil, ``defaultPath`` if it exists), then
    /// `overrides` from the command line on top.
    ///
    /// - Parameters:
    ///   - path: The file named with `--config`; nil for the default path, whose absence means built-in defaults.
    ///   - overrides: Values from command-line flags; they win over the file.
    /// - Throws: `EarshotError(.config)` (exit 78) for a file that cannot be read (a missing file only when `path`
    ///   is given), a syntax error, an unknown section or key, a key set twice, a bad value or an inconsistent group;
    ///   the message starts with `path:line:`, or with `path:` for a window and overlap that leave windows less than
    ///   5 ms apart. `EarshotError(.usage)` (exit 64) for a bad override, naming its flag.
    ///   Class names are checked later, against the classifier's labels, by ``resolvedGroups(classLabels:)``.
    package static func load(path: String?, overrides: Overrides = Overrides()) throws(EarshotError)
        -> DaemonConfiguration
    {
        let configuration = try parse(fileAt: path ?? defaultPath, required: path != nil).applying(overrides)
        // Window and overlap together: windows may not start less than 5 ms apart (see ClassifySoundRequest).
        do {
            _ = try ClassifySoundRequest(
                windowDuration: configuration.analysis.windowDuration, overlapFactor: configuration.analysis.overlapFactor)
        } catch {
            let given = overrides.overlapFactor != nil || overrides.windowDuration != nil
            throw given ? EarshotError(.usage, "--window/--overlap: \(error.message)")
                : EarshotError(.config, "\(path ?? defaultPath): [analysis] window and overlap: \(error.message)")
        }
        return configuration
    }

    /// A problem line as it is quoted in an error: control characters as `\xNN`, undecodable bytes as `?`, at most
    /// 60 characters (then `...`), so that a binary file does not fill the terminal with garbage.
    package static func shown(_ text: String) -> String { DisplayText.escaped(text, limit: 60) }

    /// Reads one configuration file.
    ///
    /// - Parameters:
    ///   - path: The file to read.
    ///   - required: When false, a file that does not exist gives the built-in defaults (the default path);
    ///     other failures to read it (permission, a directory) are still errors.
    /// - Throws: `EarshotError(.config)` as described in ``load(path:overrides:)``.
    package static func parse(fileAt path: String, required: Bool) throws(EarshotError) -> DaemonConfiguration {
        let bytes: [UInt8]
        do {
            bytes = try readConfigurationFile(path)
        } catch {
            if error.errno == ENOENT && !required { return DaemonConfiguration() }
            let hint = error.errno == ENOENT
                ? "check the --config path, or omit --config to run with the built-in defaults"
                : error.errno == EACCES ? "make it readable by the daemon's user, e.g. chmod 644" : error.hint
            throw EarshotError(.config, "\(path): cannot read the configuration file: \(error.text) (\(hint))",
                               cause: error.text)
        }
        return try parse(bytes: bytes, source: path)
    }

    /// Reads configuration text (the contents of a file).
    ///
    /// - Parameter source: The name used at the start of messages, normally the file's path.
    /// - Throws: `EarshotError(.config)` as described in ``load(path:overrides:)``.
    package static func parse(_ text: String, source: String) throws(EarshotError) -> DaemonConfiguration {
        try parse(bytes: Array(text.utf8), source: source)
    }

    package static func parse(bytes: [UInt8], source: String) throws(EarshotError) -> DaemonConfiguration {
        do {
            return try parseEntries(bytes: bytes, source: source)
        } catch {
            throw redactingURLs(in: error, quoting: bytes)
        }
    }

    /// `error` with every URL it quotes from `text` (a configuration file's bytes) shown cut, as the logs show a
    /// notification URL (``NotifySettings/redactingURLs(_:quoting:)``), whatever key, value or line quotes it.
    package static func redactingURLs(in error: EarshotError, quoting text: [UInt8]) -> EarshotError {
        let source = String(decoding: text, as: UTF8.self)
        return EarshotError(error.code, Notify.redactingURLs(error.message, quoting: source), cause: error.cause)
    }

    /// ``redactingURLs(in:quoting:)`` with the text of the configuration file at `path` (``defaultPath`` when nil),
    /// for errors found after the file was read (a class name of `[group.NAME] classes`, a path): the daemon's start,
    /// `--check-config` and a reload say them through it. A file that cannot be read leaves `error` as it is.
    package static func redactingURLs(in error: EarshotError, configPath path: String?) -> EarshotError {
        guard let bytes = try? readConfigurationFile(path ?? defaultPath) else { return error }
        return redactingURLs(in: error, quoting: bytes)
    }

    private static func parseEntries(bytes: [UInt8], source: String) throws(EarshotError) -> DaemonConfiguration {
        let file = INIFile(bytes: bytes)
        var parser = ConfigurationParser(source: source)
        // Entries before libinih's first problem line are checked first, so the first error in the file is reported.
        let problemLine = file.problem?.line ?? Int.max
        try parser.take(file.entries.filter { $0.line < problemLine })
        if let problem = file.problem {
            switch problem {
            case .syntax(let line, let text):
                throw EarshotError(
                    .config,
                    "\(source):\(line): expected \"key = value\", \"[section]\" or a comment, found \"\(Self.shown(text))\""
                        + (text.unicodeScalars.contains { $0 == "\u{FFFD}" || ($0.value < 0x20 && $0 != "\t") }
                            ? " (is it a text file?)" : ""))
            case .tooLong(let line, let limit):
                // libinih still read the line, cut: its key says what the line was.
                let cut = file.entries.first { $0.line == line }
                let fix: String
                if cut?.section == "notify" && cut?.key == "url" {
                    // A URL that long fits on no line, indented or not (an indented line starts with a space).
                    fix = longestURLBytes(bytes: bytes, line: line, continuation: cut?.isContinuation == true) >= limit
                        ? "a URL of \(limit) bytes or more goes in a file named by [notify] url_file (one URL per line, no line limit)"
                        : "put the URLs on indented lines after url =, one per line, or in a file named by [notify] url_file"
                } else {
                    fix = "split a long list over indented continuation lines"
                }
                throw EarshotError(.config, "\(source):\(line): line longer than \(limit) bytes; \(fix)")
            case .failed(let status):
                throw EarshotError(.config, "\(source): libinih could not read the file (ini_parse_stream returned \(status))")
            }
        }
        try parser.finish()
        return parser.configuration
    }

    /// The bytes of the longest word of `[notify] url` on 1-based `line` of `bytes`, after `url =` unless the line
    /// is a `continuation`.
    private static func longestURLBytes(bytes: [UInt8], line: Int, continuation: Bool) -> Int {
        let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        guard line >= 1, line <= lines.count else { return 0 }
        var text = lines[line - 1]
        if !continuation, let equals = text.firstIndex(where: { $0 == UInt8(ascii: "=") || $0 == UInt8(ascii: ":") }) {
            text = text[text.index(after: equals)...]
        }
        let blank: Set<UInt8> = [UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r")]
        return text.split(whereSeparator: { blank.contains($0) }).map(\.count).max() ?? 0
    }
}

/// Turns libinih's entries into a configuration, checking every key and value as it goes.
package struct ConfigurationParser {
    package let source: String
    package var configuration = DaemonConfiguration()
    /// First line of each `section` + "\n" + `key`, to refuse keys set twice.
    private var keyLines: [String: Int] = [:]
    /// First line seen in each group section.
    private var groupLines: [String: Int] = [:]
    private var previous: INIEntry?

    package init(source: String) {
        self.source = source
    }

    private func failure(_ entry: INIEntry, _ text: String) -> EarshotError {
        EarshotError(.config, "\(source):\(entry.line): [\(entry.section)] \(text)")
    }

    private func badValue(_ entry: INIEntry, _ requirement: String) -> EarshotError {
        failure(entry, "\(entry.key) = \(entry.value): \(requirement)")
    }

    private func value<T>(_ rule: SettingRule<T>, _ entry: INIEntry) throws(EarshotError) -> T {
        guard let value = rule.parse(entry.value) else { throw badValue(entry, rule.requirement(for: entry.value)) }
        return value
    }

    package mutating func take(_ entries: [INIEntry]) throws(EarshotError) {
        for entry in entries {
            try take(entry)
            previous = entry
        }
    }

    private mutating func take(_ entry: INIEntry) throws(EarshotError) {
        if entry.section.isEmpty {
            throw EarshotError(
                .config, "\(source):\(entry.line): \(entry.key): key outside a section; put it under its [section] header")
        }
        if entry.isContinuation {
            return try continueList(entry)
        }
        let groupName: String?
        if entry.section.hasPrefix(DaemonConfiguration.groupSectionPrefix) {
            let name = String(entry.section.dropFirst(DaemonConfiguration.groupSectionPrefix.count))
            guard SettingRules.isValidGroupName(name) else {
                throw EarshotError(
                    .config,
                    "\(source):\(entry.line): [\(entry.section)]: a group name is 1 to 64 lowercase letters, digits and _ (e.g. [group.kettle])")
            }
            if let use = LabelGroup.reservedNames[name] {
                throw EarshotError(
                    .config,
                    "\(source):\(entry.line): [\(entry.section)]: the group name \(name) is reserved: \(use) (give the group another name, e.g. [group.\(name)_sound], and use that name in [detection] watch)")
            }
            groupName = name
            if groupLines[name] == nil { groupLines[name] = entry.line }
            guard DaemonConfiguration.groupKeys.contains(entry.key) else {
                throw unknownKey(entry, keys: DaemonConfiguration.groupKeys)
            }
        } else {
            groupName = nil
            guard let keys = DaemonConfiguration.sectionKeys.first(where: { $0.key == entry.section })?.value else {
                let sections = DaemonConfiguration.sectionKeys.map(\.key) + ["group.NAME"]
                let typo = NameSuggestion.likelyTypo(of: entry.section, among: sections)
                let guess = typo.map { "did you mean [\($0)]? " } ?? ""
                throw EarshotError(
                    .config,
                    "\(source):\(entry.line): [\(entry.section)]: unknown section (\(guess)sections: \(sections.joined(separator: ", ")))")
            }
            if entry.section == "mqtt", entry.key == "password" {
                throw failure(entry, "password: an inline password is refused (the configuration file is often world-readable); write it on the first line of a file only the daemon's user can read (chown root:earshot and chmod 640) and set password_file = /etc/earshot/mqtt-password")
            }
            guard keys.contains(entry.key) else { throw unknownKey(entry, keys: keys) }
        }
        let slot = entry.section + "\n" + entry.key
        if let first = keyLines[slot] {
            let more = entry.section == "notify" && entry.key == "url"
                ? ", and put more URLs on indented lines after it or in a file named by [notify] url_file" : ""
            throw failure(entry, "\(entry.key): set twice (also on line \(first)); keep one\(more)")
        }
        keyLines[slot] = entry.line
        if let groupName {
            try setGroupKey(entry, group: groupName)
        } else {
            // Where each key was set ("SECTION.KEY"), for checks after loading (paths of the wrong kind).
            if configuration.locations["\(entry.section).\(entry.key)"] == nil {
                configuration.locations["\(entry.section).\(entry.key)"] = "\(source):\(entry.line)"
            }
            try setKey(entry)
        }
    }

    private func unknownKey(_ entry: INIEntry, keys: [String]) -> EarshotError {
        let guess = NameSuggestion.likelyTypo(of: entry.key, among: keys).map { "did you mean \($0)? " } ?? ""
        return failure(entry, "\(entry.key): unknown key (\(guess)keys: \(keys.joined(separator: ", ")))")
    }

    /// `existing` followed by the model files of `entry` (absolute paths separated by `|`, names distinct); records
    /// where each file was named (`DaemonConfiguration.modelLocations`).
    private mutating func modelFiles(_ entry: INIEntry, adding existing: [String]) throws(EarshotError) -> [String] {
        let items = SettingRules.listItems(entry.value, separators: ["|"])
        for item in items where !item.hasPrefix("/") {
            throw badValue(entry, "\"\(item)\" must be an absolute path (e.g. /var/lib/earshot/doorbell.earshot)")
        }
        let files = existing + items
        if let problem = HeadModelSet.nameProblem(paths: files) { throw badValue(entry, problem) }
        for item in items { configuration.locations[DaemonConfiguration.modelLocationKey(item)] = "\(source):\(entry.line)" }
        return files
    }

    /// An indented line: more items of a list, or a mistake.
    private mutating func continueList(_ entry: INIEntry) throws(EarshotError) {
        let isGroupClasses = entry.section.hasPrefix(DaemonConfiguration.groupSectionPrefix) && entry.key == "classes"
        let isWatch = entry.section == "detection" && entry.key == "watch"
        let isModels = entry.section == "models" && entry.key == "files"
        let isNotifyURL = entry.section == "notify" && entry.key == "url"
        // A URL quoted here is shown cut by parse(bytes:source:), as in every configuration error.
        let shown = entry.value
        guard isGroupClasses || isWatch || isModels || isNotifyURL, previous?.section == entry.section,
              previous?.key == entry.key
        else {
            throw failure(
                entry,
                "\(entry.key): the indented line \"\(shown)\" continues the value of \(entry.key), which takes one line; remove the indentation")
        }
        // A URL's query holds "=": only a line whose first word is no URL reads as a key.
        let firstWord = entry.value.prefix { $0 != " " && $0 != "\t" }
        if entry.value.contains("="), !isNotifyURL || !firstWord.contains("://") {
            throw failure(
                entry,
                "\(entry.key): the indented line \"\(shown)\" is read as more of the \(entry.key) list; remove the indentation to start a new key")
        }
        if isNotifyURL {
            if let problem = configuration.notify.addURLs(entry.value) { throw failure(entry, "url: \(problem)") }
        } else if isWatch {
            configuration.detection.watch += SettingRules.listItems(entry.value, separators: SettingRules.groupSeparators)
        } else if isModels {
            configuration.models.files = try modelFiles(entry, adding: configuration.models.files)
        } else {
            let name = String(entry.section.dropFirst(DaemonConfiguration.groupSectionPrefix.count))
            let more = SettingRules.listItems(entry.value, separators: SettingRules.classSeparators)
            configuration.detection.groups[name, default: .init()].classLabels =
                (configuration.detection.groups[name]?.classLabels ?? []) + more
        }
    }

    private mutating func setKey(_ entry: INIEntry) throws(EarshotError) {
        switch (entry.section, entry.key) {
        case ("capture", "device"):
            configuration.capture.device = try value(SettingRules.device, entry)
        case ("capture", "input"):
            configuration.capture.input =
                entry.value.isEmpty ? nil : entry.value == "-" ? .standardInput : .file(path: entry.value)
            configuration.locations["capture.input"] = "\(source):\(entry.line)"
        case ("capture", "input_rate"):
            configuration.capture.inputSampleRate = try value(SettingRules.inputSampleRate, entry)
        case ("analysis", "window"):
            configuration.analysis.windowDuration = try value(SettingRules.windowDuration, entry)
        case ("analysis", "overlap"):
            configuration.analysis.overlapFactor = try value(SettingRules.overlapFactor, entry)
        case ("analysis", "gate_dbfs"):
            configuration.analysis.gateThresholdDBFS = try value(SettingRules.gateThresholdDBFS, entry)
        case ("analysis", "silence_minutes"):
            configuration.analysis.silenceMinutes = try value(SettingRules.silenceMinutes, entry)
        case ("detection", "watch"):
            configuration.detection.watch = SettingRules.listItems(entry.value, separators: SettingRules.groupSeparators)
            configuration.locations["detection.watch"] = "\(source):\(entry.line)"
        case ("detection", "alarm_mute_minutes"):
            configuration.mutes.alarmMinutes = try value(SettingRules.muteMinutes, entry)
        case ("detection", "mute_minutes"):
            configuration.mutes.minutes = try value(SettingRules.muteMinutes, entry)
        case ("output", "socket"):
            configuration.output.socketPath = try value(SettingRules.socketPath, entry)
        case ("output", "socket_mode"):
            configuration.output.socketMode = try value(SettingRules.socketMode, entry)
        case ("output", "client_queue_kib"):
            configuration.output.clientQueueKiB = try value(SettingRules.clientQueueKiB, entry)
        case ("output", "max_clients"):
            configuration.output.maxClients = try value(SettingRules.maxClients, entry)
        case ("output", "max_clients_per_user"):
            configuration.output.maxClientsPerUser = try value(SettingRules.maxClients, entry)
        case ("output", "stalled_client_seconds"):
            configuration.output.stalledClientSeconds = try value(SettingRules.stalledClientSeconds, entry)
        case ("output", "control_users"):
            var uids: [UInt32] = []
            for name in SettingRules.listItems(entry.value, separators: [",", " "]) {
                guard let uid = SettingRules.userID(name) else {
                    throw badValue(entry, "\"\(DaemonConfiguration.shown(name))\" is not a user on this system (give user names or uids, e.g. root, earshot, 1000)")
                }
                if !uids.contains(uid) { uids.append(uid) }
            }
            configuration.output.controlUsers = uids
        case ("output", "journal"):
            configuration.output.journal = try value(SettingRules.flag, entry)
        case ("models", "files"):
            configuration.models.files = try modelFiles(entry, adding: [])
        case ("daemon", "watchdog"):
            configuration.daemon.watchdog = try value(SettingRules.flag, entry)
        case ("alarms", "pattern_detection"):
            configuration.alarms.patternDetection = try value(SettingRules.flag, entry)
        case ("clips", _):
            if let requirement = configuration.setClipsKey(key: entry.key, value: entry.value) {
                throw badValue(entry, requirement)
            }
            if entry.key == "directory" { configuration.locations["clips.directory"] = "\(source):\(entry.line)" }
        case ("metrics", _):
            if let requirement = configuration.metrics.set(key: entry.key, value: entry.value) {
                throw badValue(entry, requirement)
            }
            configuration.locations["metrics.\(entry.key)"] = "\(source):\(entry.line)"
        case ("mqtt", _):
            if let requirement = configuration.mqtt.set(key: entry.key, value: entry.value) {
                throw badValue(entry, requirement)
            }
            if ["password_file", "cafile", "certfile", "keyfile"].contains(entry.key) {
                configuration.locations["mqtt.\(entry.key)"] = "\(source):\(entry.line)"
            }
        case ("notify", _):
            if let requirement = configuration.notify.set(key: entry.key, value: entry.value) {
                // Never the value of url: a URL is a password (the requirement shows the bad one as logs do).
                throw entry.key == "url" ? failure(entry, "url: \(requirement)") : badValue(entry, requirement)
            }
        case ("history", _), ("sleep", _):
            if let requirement = configuration.setHomeKey(section: entry.section, key: entry.key, value: entry.value) {
                throw badValue(entry, requirement)
            }
            if entry.section == "history", entry.key == "path" {
                configuration.locations["history.path"] = "\(source):\(entry.line)"
            }
            if entry.section == "sleep", entry.key == "model" {
                configuration.locations["sleep.model"] = "\(source):\(entry.line)"
            }
        default:
            // sectionKeys and this switch list the same keys; a key in one but not the other is a programming error
            // caught by the shipped-file test, reported here as a config error rather than a crash.
            throw failure(entry, "\(entry.key): known key without a setter (report this as a bug)")
        }
    }

    private mutating func setGroupKey(_ entry: INIEntry, group name: String) throws(EarshotError) {
        if name == SnoreDetector.groupName {
            // One snore detector decides snoring for the daemon, its sleep sessions and the report.
            throw failure(entry, "\(entry.key): the snoring group is decided by the snore detector, not by class scores (remove [group.snoring]; tune it in [sleep] with threshold, rhythm_threshold or model)")
        }
        var settings = configuration.detection.groups[name] ?? DaemonConfiguration.GroupSettings()
        let isLevelGroup = LabelGroup.presets[name]?.levelThresholdDBFS != nil
        if isLevelGroup, DaemonConfiguration.classifierOnlyGroupKeys.contains(entry.key) {
            throw failure(entry, "\(entry.key): the \(name) group is driven by the level alone, not the classifier (set level_dbfs and min_seconds instead)")
        }
        if !isLevelGroup, DaemonConfiguration.levelOnlyGroupKeys.contains(entry.key) {
            throw failure(entry, "\(entry.key): only the \(LabelGroup.loudName) group is driven by level (use [group.\(LabelGroup.loudName)] and add \(LabelGroup.loudName) to [detection] watch)")
        }
        switch entry.key {
        case "classes":
            settings.classLabels = SettingRules.listItems(entry.value, separators: SettingRules.classSeparators)
            configuration.locations["group.\(name).classes"] = "\(source):\(entry.line)"
        case "threshold":
            settings.threshold = try value(SettingRules.threshold, entry)
        case "onset_windows":
            settings.onsetWindows = try value(SettingRules.onsetCount, entry)
        case "onset_of":
            settings.onsetOf = try value(SettingRules.onsetCount, entry)
        case "hold_seconds":
            settings.holdSeconds = try value(SettingRules.holdSeconds, entry)
        case "min_interval_seconds":
            settings.minIntervalSeconds = try value(SettingRules.minIntervalSeconds, entry)
        case "level_dbfs":
            settings.levelDBFS = try value(SettingRules.levelDBFS, entry)
        case "min_seconds":
            settings.minSeconds = try value(SettingRules.loudMinSeconds, entry)
        default:
            throw failure(entry, "\(entry.key): known key without a setter (report this as a bug)")
        }
        configuration.detection.groups[name] = settings
    }

    /// Checks what needs the whole file: new groups complete, k <= n, lists not empty, watched names defined.
    package mutating func finish() throws(EarshotError) {
        let presetNames = LabelGroup.presets.keys.sorted()
        for (name, settings) in configuration.detection.groups.sorted(by: { groupLine($0.key) < groupLine($1.key) }) {
            let section = "[group.\(name)]"
            if LabelGroup.presets[name] == nil {
                let missing = [settings.classLabels == nil ? "classes" : nil, settings.threshold == nil ? "threshold" : nil]
                    .compactMap { $0 }
                if !missing.isEmpty {
                    throw EarshotError(
                        .config,
                        "\(source):\(groupLine(name)): \(section): a new group needs \(missing.joined(separator: " and ")) (presets, which need neither: \(presetNames.joined(separator: ", ")))")
                }
            }
            if let classes = settings.classLabels, classes.isEmpty {
                throw EarshotError(
                    .config,
                    "\(source):\(keyLine(section: "group.\(name)", key: "classes")): \(section) classes: must name at least one class label (separate labels with |)")
            }
            let preset = LabelGroup.presets[name]
            let onsetWindows = settings.onsetWindows ?? preset?.onsetWindows ?? 2
            let onsetOf = settings.onsetOf ?? preset?.onsetOf ?? 3
            if onsetWindows > onsetOf {
                let key = settings.onsetWindows != nil ? "onset_windows" : "onset_of"
                let shown = key == "onset_windows" ? onsetWindows : onsetOf
                throw EarshotError(
                    .config,
                    "\(source):\(keyLine(section: "group.\(name)", key: key)): \(section) \(key) = \(shown): onset_windows (\(onsetWindows)) must be at most onset_of (\(onsetOf))")
            }
        }
        let watchLine = keyLine(section: "detection", key: "watch")
        if configuration.detection.watch.isEmpty {
            throw EarshotError(
                .config,
                "\(source):\(watchLine): [detection] watch: must name at least one group (separate names with |, commas or spaces)")
        }
        let rhythmWritten = keyLine(section: "sleep", key: "rhythm_threshold") > 0
        if let (key, problem) = configuration.homeConsistencyProblem(rhythmThresholdWritten: rhythmWritten) {
            throw EarshotError(.config, "\(source):\(keyLine(section: "sleep", key: key)): \(problem)")
        }
        configuration.detection.watch = uniqued(configuration.detection.watch)
        if let unknown = configuration.unknownWatchedGroup() {
            throw EarshotError(.config, "\(source):\(watchLine): [detection] watch: \(unknown)")
        }
        if let unknown = configuration.unknownClipGroup() {
            throw EarshotError(.config, "\(source):\(keyLine(section: "clips", key: "groups")): [clips] groups: \(unknown)")
        }
        if configuration.metrics.enabled, let problem = configuration.metrics.remoteProblem {
            let line = keyLine(section: "metrics", key: "listen")
            throw EarshotError(.config, "\(source):\(line): [metrics] \(problem)")
        }
        // Notifications name the daemon as MQTT does (`[mqtt] node`, or the host name): the sink gets the name.
        configuration.notify.node = configuration.mqtt.node
        if let unknown = configuration.unknownNotifyGroup() {
            throw EarshotError(.config, "\(source):\(keyLine(section: "notify", key: "groups")): [notify] groups: \(unknown)")
        }
        if let problem = configuration.mqtt.inconsistency {
            // The line of the file key that needs the others (password_file, certfile, keyfile or cafile).
            let keys = problem.hasPrefix("password_file") ? ["password_file"] : ["certfile", "keyfile", "cafile"]
            let line = keys.map { keyLine(section: "mqtt", key: $0) }.first { $0 > 0 } ?? 0
            throw EarshotError(.config, "\(source):\(line): [mqtt] \(problem)")
        }
    }

    private func groupLine(_ name: String) -> Int { groupLines[name] ?? 0 }

    private func keyLine(section: String, key: String) -> Int { keyLines[section + "\n" + key] ?? 0 }
}

package func uniqued(_ names: [String]) -> [String] {
    var seen = Set<String>()
    return names.filter { seen.insert($0).inserted }
}

extension DaemonConfiguration {
    /// Names of every group this configuration knows: the presets and the `[group.NAME]` sections, sorted.
    package var groupNames: [String] {
        Set(LabelGroup.presets.keys).union(detection.groups.keys).sorted()
    }

    /// The groups a subscriber may not pick because the daemon does not watch them, and how to watch one, for
    /// ``EventServer/Configuration/unwatchedGroups``: ``groupNames`` less `subscribable` (the watched groups and
    /// the ones the daemon adds: snoring, the alarm patterns' groups).
    ///
    /// - Parameters:
    ///   - subscribable: the names the daemon's socket accepts.
    ///   - configPath: the file given with `--config`, or nil for ``defaultPath``.
    /// - Returns: advice such as `[detection] watch in /etc/earshot/earshotd.conf, then reload earshotd (systemctl
    ///   reload earshotd)`, or `earshotd's --watch list, then restart earshotd` when `--watch` set the list (a
    ///   reload keeps the command line).
    package func unwatchedGroups(subscribable: [String], configPath: String?) -> EventServer.UnwatchedGroups {
        let names = groupNames.filter { !subscribable.contains($0) }
        let advice = locations["detection.watch"] == "--watch"
            ? "earshotd's --watch list, then restart earshotd"
            : "[detection] watch in \(configPath ?? Self.defaultPath), then reload earshotd (systemctl reload earshotd)"
        // Subscribable but not in the watch list: snoring (its events go out during sleep sessions) and the
        // groups the alarm pattern detector adds; listed apart from the watched groups in a refused subscribe.
        var also: [String: String] = [:]
        for group in subscribable where !detection.watch.contains(group) {
            also[group] = group == SnoreDetector.groupName ? "sleep sessions" : "alarm patterns"
        }
        return EventServer.UnwatchedGroups(names: names, advice: advice, alsoSubscribable: also)
    }

    /// A description of the first watched name that is not a group, or nil when all are groups.
    package func unknownWatchedGroup() -> String? {
        let names = groupNames
        for name in detection.watch where !names.contains(name) {
            let guess = NameSuggestion.likelyTypo(of: name, among: names).map { "did you mean \($0)? " } ?? ""
            // Only a valid name may be offered as a new section: [group.BABY_CRY] would itself be refused.
            let newGroup = SettingRules.isValidGroupName(name)
                ? "a new group needs a [group.\(name)] section with classes and threshold"
                : "a group name is 1 to 64 lowercase letters, digits and _"
            return "\"\(name)\" is not a group (\(guess)groups: \(names.joined(separator: ", ")); \(newGroup))"
        }
        return nil
    }
}

/// A file that could not be read, with errno.
package struct FileReadError: Error {
    package var errno: Int32
    package var text: String
    package var hint: String
}

/// Reads a whole regular file of at most `DaemonConfiguration.maximumFileBytes` bytes, never waiting on a FIFO
/// (``RegularFile``).
package func readConfigurationFile(_ path: String) throws(FileReadError) -> [UInt8] {
    do {
        return try RegularFile.read(path, limit: DaemonConfiguration.maximumFileBytes)
    } catch {
        switch error {
        case .cannotOpen(let code), .readFailed(let code):
            throw FileReadError(errno: code, text: String(cString: strerror(code)), hint: "check the path")
        case .notRegularFile(.directory):
            throw FileReadError(errno: EISDIR, text: String(cString: strerror(EISDIR)), hint: "name the file, not its directory")
        case .notRegularFile(let kind):
            throw FileReadError(errno: EINVAL, text: "\(kind.phrase), not a regular file", hint: "name a text file")
        case .tooLarge:
            throw FileReadError(errno: EFBIG, text: "larger than 1 MiB", hint: "this is not a configuration file")
        }
    }
}
