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
    /// Settings given on the command line; each non-nil value replaces the file's.
    package struct Overrides: Sendable, Equatable {
        /// `--device PCM`; also clears the file's `input`, so that the named device is captured.
        package var device: String?
        /// `--input FILE|-`.
        package var input: InputSource?
        /// `--input-rate HZ` (raw standard input only).
        package var inputSampleRate: Int?
        /// `--socket PATH`.
        package var socketPath: String?
        /// `--window S`, seconds.
        package var windowDuration: Double?
        /// `--overlap F`, in [0, 1).
        package var overlapFactor: Double?
        /// `--gate-dbfs X`, dBFS.
        package var gateThresholdDBFS: Double?
        /// `--watch G,G...`: group names.
        package var watch: [String]?
        /// `--no-journal` sets false.
        package var journal: Bool?

        package init(
            device: String? = nil, input: InputSource? = nil, inputSampleRate: Int? = nil, socketPath: String? = nil,
            windowDuration: Double? = nil, overlapFactor: Double? = nil, gateThresholdDBFS: Double? = nil,
            watch: [String]? = nil, journal: Bool? = nil
        ) {
            self.device = device
            self.input = input
            self.inputSampleRate = inputSampleRate
            self.socketPath = socketPath
            self.windowDuration = windowDuration
            self.overlapFactor = overlapFactor
            self.gateThresholdDBFS = gateThresholdDBFS
            self.watch = watch
            self.journal = journal
        }
    }

    /// This configuration with `overrides` applied.
    ///
    /// - Throws: `EarshotError(.usage)` (exit 64) naming the flag, for a value out of range or a `--watch` name that
    ///   is neither a preset nor a `[group.NAME]` of the file, e.g.
    ///   `--overlap 1.5: must be in [0, 1)`.
    package func applying(_ overrides: Overrides) throws(EarshotError) -> DaemonConfiguration {
        func checked<T>(_ value: T?, _ rule: SettingRule<T>, flag: String, shown: (T) -> String) throws(EarshotError)
            -> T?
        {
            guard let value else { return nil }
            guard rule.isValid(value) else {
                throw EarshotError(.usage, "\(flag) \(shown(value)): \(rule.requirement)")
            }
            return value
        }
        var result = self
        if let device = try checked(overrides.device, SettingRules.device, flag: "--device", shown: { $0 }) {
            result.capture.device = device
            result.capture.input = nil
        }
        if let input = overrides.input {
            if case .file(let path) = input, path.isEmpty {
                throw EarshotError(.usage, "--input : must be a sound file or - for raw S16_LE on standard input")
            }
            result.capture.input = input
            result.locations["capture.input"] = "--input"
        }
        if let rate = try checked(overrides.inputSampleRate, SettingRules.inputSampleRate, flag: "--input-rate",
                                  shown: { String($0) }) {
            result.capture.inputSampleRate = rate
        }
        if let path = try checked(overrides.socketPath, SettingRules.socketPath, flag: "--socket", shown: { $0 }) {
            result.output.socketPath = path
            result.locations["output.socket"] = "--socket"
        }
        if let window = try checked(overrides.windowDuration, SettingRules.windowDuration, flag: "--window",
                                    shown: SettingRules.format) {
            result.analysis.windowDuration = window
        }
        if let overlap = try checked(overrides.overlapFactor, SettingRules.overlapFactor, flag: "--overlap",
                                     shown: SettingRules.format) {
            result.analysis.overlapFactor = overlap
        }
        if let gate = try checked(overrides.gateThresholdDBFS, SettingRules.gateThresholdDBFS, flag: "--gate-dbfs",
                                  shown: SettingRules.format) {
            result.analysis.gateThresholdDBFS = gate
        }
        if let watch = overrides.watch {
            let names = uniqued(watch)
            guard !names.isEmpty else {
                throw EarshotError(.usage, "--watch: must name at least one group (separate names with ,)")
            }
            result.detection.watch = names
            result.locations["detection.watch"] = "--watch"
            if let unknown = result.unknownWatchedGroup() {
                throw EarshotError(.usage, "--watch \(names.joined(separator: ",")): \(unknown)")
            }
        }
        if let journal = overrides.journal {
            result.output.journal = journal
        }
        return result
    }

    /// Every head model file to load: the built-in heads the groups name (the `baby_cry` preset's
    /// `builtin_baby_cry:baby_cry`; ``HeadModelSet/builtInPaths(forClassLabels:directory:)``, in the built-in
    /// model's directory), then `[models] files`.
    /// - Throws: `ModelLocator.builtInDirectory()`'s error when a group needs a built-in head and the built-in model
    ///   cannot be found.
    package func headModelFiles() throws(EarshotError) -> [String] {
        let names = uniqued(detection.watch + detection.groups.keys.sorted())
        let labels = names.compactMap { mergedGroup(named: $0) }.flatMap(\.classLabels)
        guard labels.contains(where: { $0.hasPrefix(HeadModelSet.builtInPrefix) }) else { return models.files }
        let builtIn = HeadModelSet.builtInPaths(forClassLabels: labels, directory: try ModelLocator.builtInDirectory())
        return builtIn + models.files.filter { !builtIn.contains($0) }
    }

    /// The head models of ``headModelFiles()``, loaded (`previous`: a reload's current set, whose unchanged files
    /// are kept rather than read again).
    /// - Throws: as ``headModelFiles()`` and `HeadModelSet.load(paths:previous:locations:)`.
    package func loadHeadModels(previous: HeadModelSet? = nil)
        throws(EarshotError) -> (set: HeadModelSet, problems: [String])
    {
        try HeadModelSet.load(paths: try headModelFiles(), previous: previous, locations: modelLocations)
    }

    /// The label groups that emit events, in watch-list order: each preset with its `[group.NAME]` overrides, or a
    /// group defined by its section; every class name checked against the classifier's labels.
    ///
    /// Class names of every group the file configures are checked, watched or not, so that a typo never waits for
    /// the day the group is watched; presets that are neither configured nor watched are not checked (a custom
    /// model may lack their labels).
    ///
    /// - Parameter classLabels: The classifier's class labels (YAMNet: the 521 AudioSet display names of
    ///   `Models/yamnet_class_map.csv`, column `display_name`).
    /// - Returns: One `LabelGroup` per name of `detection.watch`.
    /// - Throws: `EarshotError(.config)` (exit 78) for a class name that is not a label, naming the group, the class
    ///   and the nearest label, e.g. `/etc/earshot/earshotd.conf:5: [group.kettle] classes: unknown class
    ///   "kettle whistle" (nearest: "Steam whistle"; `earshot classes` lists the 521 built-in classes)`; for
    ///   `dk:cat`: `(nearest: "dk:dog"; model dk's labels: dk:background, dk:dog)`, or `(no model named dk is loaded;
    ///   add its file to [models] files)`; for a watched name that is
    ///   not a group (`EarshotError(.usage)` when the name came from `--watch`).
    package func resolvedGroups(classLabels: [String]) throws(EarshotError) -> [LabelGroup] {
        if let unknown = unknownWatchedGroup() {
            let location = locations["detection.watch"] ?? "[detection] watch"
            throw EarshotError(location == "--watch" ? .usage : .config, "\(location): \(unknown)")
        }
        let labels = Set(classLabels)
        let builtInCount = classLabels.count(where: { !$0.contains(":") })
        let checkedNames = uniqued(detection.watch + detection.groups.keys.sorted())
        var groups: [String: LabelGroup] = [:]
        for name in checkedNames {
            guard let group = mergedGroup(named: name) else { continue }
            for label in group.classLabels where !labels.contains(label) {
                // MODEL:LABEL names a custom head's label: say when that head is not loaded, and otherwise list its
                // labels (`earshot classes` lists only the built-in classes).
                let model = label.firstIndex(of: ":").map { String(label[..<$0]) }
                let modelLabels = model.map { model in classLabels.filter { $0.hasPrefix(model + ":") } } ?? []
                let hint: String
                if let model, modelLabels.isEmpty {
                    hint = "no model named \(model) is loaded; add its file to [models] files"
                } else if let model {
                    let nearest = NameSuggestion.nearestLabel(to: label, in: modelLabels) ?? ""
                    hint = "nearest: \"\(nearest)\"; model \(model)'s labels: \(modelLabels.joined(separator: ", "))"
                } else {
                    let nearest = NameSuggestion.nearestLabel(to: label, in: classLabels).map { "nearest: \"\($0)\"; " } ?? ""
                    hint = "\(nearest)`earshot classes` lists the \(builtInCount) built-in classes"
                }
                if let location = locations["group.\(name).classes"] {
                    throw EarshotError(
                        .config,
                        "\(location): [group.\(name)] classes: unknown class \"\(label)\" (\(hint))")
                }
                throw EarshotError(
                    .config,
                    "group \(name): preset class \"\(label)\" is not a label of this classifier (\(hint); set classes in [group.\(name)])")
            }
            groups[name] = group
        }
        return detection.watch.compactMap { groups[$0] }
    }

    /// The preset `name` with its `[group.NAME]` settings applied, or the group the section defines; nil for a name
    /// that is neither (or a section missing classes or threshold, which parsing refuses).
    package func mergedGroup(named name: String) -> LabelGroup? {
        let settings = detection.groups[name] ?? GroupSettings()
        var group: LabelGroup
        if let preset = LabelGroup.presets[name] {
            group = preset
        } else if let classes = settings.classLabels, let threshold = settings.threshold {
            group = LabelGroup(name: name, classLabels: classes, threshold: threshold)
        } else {
            return nil
        }
        if let classes = settings.classLabels {
            // The preset's support confirms the preset's classes; other classes stand on their own.
            if uniqued(classes) != group.classLabels { group.support = nil }
            group.classLabels = uniqued(classes)
        }
        if let threshold = settings.threshold { group.threshold = threshold }
        if let onsetWindows = settings.onsetWindows { group.onsetWindows = onsetWindows }
        if let onsetOf = settings.onsetOf { group.onsetOf = onsetOf }
        if let holdSeconds = settings.holdSeconds { group.holdSeconds = holdSeconds }
        if let minIntervalSeconds = settings.minIntervalSeconds { group.minIntervalSeconds = minIntervalSeconds }
        if group.levelThresholdDBFS != nil {
            // Level-driven (`loud`): the onset rule is min_seconds of consecutive windows on the configured grid.
            group.levelThresholdDBFS = settings.levelDBFS ?? LabelGroup.loudDefaultThresholdDBFS
            let windows = LabelGroup.levelWindows(
                minSeconds: settings.minSeconds ?? LabelGroup.loudDefaultMinSeconds,
                windowDuration: analysis.windowDuration, hopSeconds: analysis.hopSeconds)
            group.onsetWindows = windows
            group.onsetOf = windows
        }
        return group
    }
}
