import EarshotSupport
import EarshotModel
import EarshotAnalysis
/// Feeds each analysis window's class scores to one `Debouncer` per watched label group and collects the events.
///
/// The group score of a window is the maximum score over the group's classes; its top class is the class that gave
/// that maximum (the first one listed in the group on a tie).
///
/// - Important: A value type with no locks: own it on one queue (the analysis queue) and publish the returned
///   events outside.
package struct DetectionEngine: Sendable {
    /// A watched group with its class labels resolved to score indices.
    package struct WatchedGroup: Sendable, Equatable {
        package var group: LabelGroup
        /// Indices into the scores vector, in the order of `group.classLabels`.
        package var classIndices: [Int]
        /// Indices of `group.support`'s classes and veto classes (empty without support).
        package var supportIndices: [Int] = []
        package var vetoIndices: [Int] = []
    }

    /// The watched groups, in watch-list order (duplicates in the watch list are ignored).
    package let watched: [WatchedGroup]
    /// The class labels the scores are indexed by (521 AudioSet display names for YAMNet).
    package let classLabels: [String]
    private var debouncers: [Debouncer]

    /// Resolves the groups against the classifier's labels.
    ///
    /// - Parameters:
    ///   - groups: every configured group (presets and user groups); all are validated, watched or not.
    ///   - watchList: names of the groups that emit events.
    ///   - classLabels: the classifier's class labels, index = score index (e.g. `YAMNet.classLabels`).
    /// - Throws: `EarshotError(.config)` when a group name is not `[a-z0-9_]+` or appears twice, a group has no class
    ///   labels, a class label is not one of `classLabels` (the message names the group and the label and suggests
    ///   the closest labels), a threshold is outside 0...1, the onset rule is not 1 <= k <= n, a hold time or
    ///   minimum interval is negative or not finite, or the watch list names a group that is not in `groups`.
    package init(groups: [LabelGroup], watchList: [String], classLabels: [String]) throws(EarshotError) {
        var indexOf: [String: Int] = [:]
        for (index, label) in classLabels.enumerated() where indexOf[label] == nil { indexOf[label] = index }

        var byName: [String: WatchedGroup] = [:]
        for group in groups {
            try Self.validate(group)
            if byName[group.name] != nil {
                throw EarshotError(.config, "group \"\(group.name)\" is defined twice (each group name must be unique)")
            }
            func resolve(_ label: String) throws(EarshotError) -> Int {
                guard let index = indexOf[label] else {
                    let closest = Self.closestLabels(to: label, in: classLabels, limit: 3)
                    let hint = closest.isEmpty
                        ? "run `earshot classes` for the list"
                        : "closest: " + closest.map { "\"\($0)\"" }.joined(separator: ", ")
                            + "; run `earshot classes` for the list"
                    throw EarshotError(.config, "group \"\(group.name)\": unknown class label \"\(label)\" (\(hint))")
                }
                return index
            }
            var indices: [Int] = [], supportIndices: [Int] = [], vetoIndices: [Int] = []
            for label in group.classLabels { indices.append(try resolve(label)) }
            for label in group.support?.classLabels ?? [] { supportIndices.append(try resolve(label)) }
            for label in group.support?.vetoClassLabels ?? [] { vetoIndices.append(try resolve(label)) }
            byName[group.name] = WatchedGroup(
                group: group, classIndices: indices, supportIndices: supportIndices, vetoIndices: vetoIndices)
        }

        var watched: [WatchedGroup] = []
        var seen: Set<String> = []
        for name in watchList where seen.insert(name).inserted {
            guard let entry = byName[name] else {
                let known = byName.keys.sorted().joined(separator: ", ")
                throw EarshotError(.config, "watch list names unknown group \"\(name)\" (known groups: \(known))")
            }
            watched.append(entry)
        }
        self.watched = watched
        self.classLabels = classLabels
        debouncers = watched.map { Debouncer(group: $0.group) }
    }

    /// Feeds one analysis window to every watched group's debouncer.
    ///
    /// - Parameters:
    ///   - windowStart: stream time (s) of the window's first sample.
    ///   - windowDuration: window length (s), 0.96 for YAMNet.
    ///   - scores: the window's class scores in 0...1, `classLabels.count` of them (521 for YAMNet), or nil when
    ///     the level gate kept the window out of inference (a quiet window: negative for every group). An array of
    ///     the wrong length is treated as a quiet window.
    ///   - levelDBFS: the window's RMS level in dBFS (gated windows too), for level-driven groups
    ///     (``LabelGroup/levelThresholdDBFS``); nil counts as below every threshold.
    ///   - vetoed: groups for which this window counts as negative whatever its scores (a `glass_break` window
    ///     with no shatter onset in it, see `ShatterOnsets`).
    /// - Returns: the events of this window, grouped in watch-list order.
    package mutating func process(windowStart: Double, windowDuration: Double, scores: [Float]?,
                                  levelDBFS: Float? = nil, vetoed: Set<String> = []) -> [DetectionEvent] {
        let usable = scores.flatMap { $0.count == classLabels.count ? $0 : nil }
        var events: [DetectionEvent] = []
        for index in debouncers.indices {
            var groupScore: Float?
            var topClass: String?
            if let threshold = watched[index].group.levelThresholdDBFS {
                (groupScore, topClass) = LabelGroup.levelScore(levelDBFS: levelDBFS, thresholdDBFS: threshold)
            } else if let usable {
                for classIndex in watched[index].classIndices {
                    let value = usable[classIndex]
                    if value.isNaN { continue }
                    if groupScore.map({ value > $0 }) ?? true {
                        groupScore = value
                        topClass = classLabels[classIndex]
                    }
                }
                if let support = watched[index].group.support {
                    // The window counts only when the support classes sum to their threshold and the veto classes
                    // stay below theirs; the event keeps the group's own class and score.
                    var evidence: Float = 0, contrary: Float = 0
                    for classIndex in watched[index].supportIndices where !usable[classIndex].isNaN {
                        evidence += usable[classIndex]
                    }
                    for classIndex in watched[index].vetoIndices where !usable[classIndex].isNaN {
                        contrary += usable[classIndex]
                    }
                    if evidence < support.threshold || contrary >= support.vetoThreshold { groupScore = 0 }
                }
                if groupScore == nil || vetoed.contains(watched[index].group.name) { groupScore = 0 }
            }
            events += debouncers[index].process(
                windowStart: windowStart, windowDuration: windowDuration, score: groupScore, topClass: topClass)
        }
        return events
    }

    /// Reports a gap in the stream to every debouncer (see `Debouncer.reset(at:)`): open events end at their last
    /// positive window.
    package mutating func reset(at streamTime: Double) -> [DetectionEvent] {
        var events: [DetectionEvent] = []
        for index in debouncers.indices { events += debouncers[index].reset(at: streamTime) }
        return events
    }

    /// The stream ended (or the analysis changed, `reason` `.reload`): closes every open event (see
    /// `Debouncer.finish(reason:)`).
    package mutating func finish(reason: DetectionEvent.EndReason = .streamEnd) -> [DetectionEvent] {
        var events: [DetectionEvent] = []
        for index in debouncers.indices { events += debouncers[index].finish(reason: reason) }
        return events
    }

    /// Continues `previous`'s events in this engine: a reload that keeps the window grid. A group watched in both
    /// with the same rules keeps its debouncer (an open event, its k-of-n history, its minimum interval); one whose
    /// rules differ in the threshold alone keeps it too, deciding with the new threshold from the next window on.
    /// The other groups of `previous` (no longer watched, or with other classes, onset rule, hold, minimum interval,
    /// level or support) end their open events at their last positive window (reason `.reload`); such a group still
    /// watched starts afresh.
    ///
    /// - Returns: those ends, in `previous`'s watch-list order; nil, changing nothing, when the class labels differ
    ///   (the scores mean other things: end everything, `finish(reason: .reload)`).
    package mutating func takeOver(from previous: inout DetectionEngine) -> [DetectionEvent]? {
        guard previous.classLabels == classLabels else { return nil }
        var kept: Set<Int> = []
        for (index, entry) in watched.enumerated() {
            guard let old = previous.watched.firstIndex(where: { $0.group.name == entry.group.name }) else { continue }
            var before = previous.watched[old]
            before.group.threshold = entry.group.threshold
            guard before == entry else { continue }
            debouncers[index] = previous.debouncers[old]
            debouncers[index].setThreshold(entry.group.threshold)
            kept.insert(old)
        }
        var ended: [DetectionEvent] = []
        for index in previous.debouncers.indices where !kept.contains(index) {
            ended += previous.debouncers[index].finish(reason: .reload)
        }
        return ended
    }

    /// Whether a group of this name is watched.
    package func watches(_ name: String) -> Bool { watched.contains { $0.group.name == name } }

    /// The names of the groups with an open event, in watch-list order.
    package var activeGroups: [String] {
        debouncers.filter(\.isActive).map(\.group.name)
    }

    /// Checks one group's values; see `init` for the rules.
    package static func validate(_ group: LabelGroup) throws(EarshotError) {
        let name = group.name
        let nameIsValid = !name.isEmpty && name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_"
        }
        guard nameIsValid else {
            throw EarshotError(.config, "group name \"\(name)\" is invalid (use lowercase letters, digits and _)")
        }
        guard !group.classLabels.isEmpty || group.levelThresholdDBFS != nil else {
            throw EarshotError(.config, "group \"\(name)\" has no class labels (list at least one AudioSet class label)")
        }
        guard group.threshold >= 0, group.threshold <= 1 else {
            throw EarshotError(.config, "group \"\(name)\": threshold \(group.threshold) is out of range (use a value in 0...1)")
        }
        guard group.onsetOf >= 1, group.onsetWindows >= 1, group.onsetWindows <= group.onsetOf else {
            throw EarshotError(
                .config,
                "group \"\(name)\": onset rule \(group.onsetWindows) of \(group.onsetOf) windows is invalid (need 1 <= k <= n)")
        }
        guard group.holdSeconds.isFinite, group.holdSeconds >= 0 else {
            throw EarshotError(.config, "group \"\(name)\": hold time \(group.holdSeconds) s is invalid (use 0 or more seconds)")
        }
        guard group.minIntervalSeconds.isFinite, group.minIntervalSeconds >= 0 else {
            throw EarshotError(
                .config, "group \"\(name)\": minimum interval \(group.minIntervalSeconds) s is invalid (use 0 or more seconds)")
        }
    }

    /// The labels closest to `label`, best first: equal ignoring case, then labels containing it, then labels it
    /// contains, then the others within an edit distance of half the longer length; ties by edit distance, then
    /// label index. At most `limit` labels.
    package static func closestLabels(to label: String, in labels: [String], limit: Int) -> [String] {
        let wanted = Array(label.lowercased().unicodeScalars)
        guard !wanted.isEmpty, limit > 0 else { return [] }
        let wantedText = label.lowercased()
        var ranked: [(rank: Int, distance: Int, index: Int)] = []
        for (index, candidate) in labels.enumerated() {
            let lower = candidate.lowercased()
            let distance = editDistance(wanted, Array(lower.unicodeScalars))
            let rank: Int
            if lower == wantedText {
                rank = 0
            } else if lower.contains(wantedText) {
                rank = 1
            } else if wantedText.contains(lower) {
                rank = 2
            } else if distance * 2 <= max(wanted.count, lower.unicodeScalars.count) {
                rank = 3
            } else {
                continue
            }
            ranked.append((rank, distance, index))
        }
        ranked.sort { ($0.rank, $0.distance, $0.index) < ($1.rank, $1.distance, $1.index) }
        return ranked.prefix(limit).map { labels[$0.index] }
    }

    /// Levenshtein distance between two scalar arrays.
    private static func editDistance(_ a: [Unicode.Scalar], _ b: [Unicode.Scalar]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        var current = Array(repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                let substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
                current[j] = min(substitution, previous[j] + 1, current[j - 1] + 1)
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }
}
