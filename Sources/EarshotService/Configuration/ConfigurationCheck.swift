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
    /// What `earshotd --check-config` does: loads the configuration as the daemon would start with it, resolves the
    /// groups' class names against the classifier's labels (and the `[models]` heads'), and opens the input file
    /// when `[capture] input` or `--input` names one.
    ///
    /// - Returns: the line printed on success, without the program prefix, e.g.
    ///   `configuration OK (watching smoke_alarm, co_alarm, glass_break)`.
    /// - Throws: ``EarshotError``: those of ``load(path:overrides:)`` (78 bad configuration, 64 bad override), of
    ///   the model files and of ``resolvedGroups(classLabels:)`` (78 unknown class); for an input file that cannot be
    ///   used, the decoder's error (``AudioFileDecoder/init(url:)``) after where the input was set, with the status
    ///   the daemon would exit with at start: 66 when the file is missing or unreadable, 65 when it is not usable
    ///   audio. E.g. `/etc/earshot/earshotd.conf:4: [capture] input: /srv/a.wav: no such file (check the path)`;
    ///   those of ``checkStoragePaths()`` (78) and of ``loadSnoreHead()`` (a `[sleep] model` that is not a head
    ///   with label `snoring`); those of ``checkFallbackInput(_:)`` for `--fallback-input`; those of
    ///   ``readNotifyURLs()`` (78); for each of `serviceUsers` (by default, when run as root, who reads any file,
    ///   the users the installed units of earshotd run it as: ``ServiceUnits/users(in:)``, `earshot` with the
    ///   package's units; none without them, or when they run it as root), those of
    ///   ``checkSecretFiles(readableBy:)`` (78: the service could not read a password or URL file);
    ///   with `[mqtt] enabled`, those of ``readMQTTPassword()`` (78) and
    ///   ``checkMQTTBroker(timeout:)`` (69 unreachable, 78 refused credentials), after which the line adds
    ///   `; the MQTT broker HOST:PORT accepted the connection`; with `[metrics] enabled`, those of
    ///   ``checkMetricsListen()`` (78: the address is in use by another program, as at start; held by a running
    ///   earshotd, the line adds its note); those of ``checkSocketDirectory()`` (73). Without `--config` and with no file at
    ///   ``defaultPath``, the line ends `; no /etc/earshot/earshotd.conf, so the built-in defaults`.
    ///   `warn` gets the lines of ``warnings()`` and ``storageWarnings()``: settings the daemon starts with but
    ///   that do nothing or lose events; and a line per `[models]` model trained on another window than `[analysis]
    ///   window` (``HeadModelSet/windowMismatches(windowDuration:)``).
    package static func check(
        commandLine: DaemonCommandLine, serviceUsers: [String] = geteuid() == 0 ? ServiceUnits.users() : [],
        warn: (String) -> Void = { _ in }
    ) throws(EarshotError) -> String {
        var configuration = try load(path: commandLine.configPath, overrides: commandLine.overrides)
        try configuration.readMQTTPassword()
        try configuration.readNotifyURLs()
        for user in serviceUsers { try configuration.checkSecretFiles(readableBy: user) }
        let models = try configuration.loadHeadModels().set
        _ = try configuration.resolvedGroups(classLabels: try BuiltInClassifier.shared().classLabels + models.classLabels)
        try configuration.checkStoragePaths()
        try configuration.checkSocketDirectory()
        let metricsNote = try configuration.checkMetricsListen().map { "; \($0)" } ?? ""
        _ = try configuration.loadSnoreHead()  // `[sleep] model` loads as at start (a head with label snoring)
        try configuration.checkInputFile()
        if let fallback = commandLine.fallbackInput { try checkFallbackInput(fallback) }
        for line in configuration.warnings() + configuration.storageWarnings()
            + models.windowMismatches(windowDuration: configuration.analysis.windowDuration) { warn(line) }
        let broker = configuration.mqtt.enabled
            ? "; the MQTT broker \(try configuration.checkMQTTBroker()) accepted the connection" : ""
        // Without --config a missing default file is not an error (the built-in defaults apply): say which.
        let defaults = commandLine.configPath == nil && PathKind(path: defaultPath) == .missing
            ? "; no \(defaultPath), so the built-in defaults" : ""
        return "configuration OK (watching \(configuration.detection.watch.joined(separator: ", ")))\(metricsNote)\(broker)\(defaults)"
    }

    /// For `--check-config`: the directory of `[output] socket` (or `--socket`) must exist, as the daemon binds the
    /// socket there at start; under `/run/earshot` it need not, systemd makes it at start (`RuntimeDirectory=`).
    /// - Throws: `EarshotError(.cannotCreate)` (73) with the line the daemon's start would give, e.g. `cannot
    ///   create socket /srv/x/e.sock: No such file or directory (create the directory, run under systemd with
    ///   RuntimeDirectory=earshot, or choose another --socket)`.
    package func checkSocketDirectory() throws(EarshotError) {
        let path = output.socketPath
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return }
        let directory = String(path[..<slash])
        guard directory != "/run/earshot", !directory.hasPrefix("/run/earshot/"), PathKind(path: directory) == .missing
        else { return }
        throw EarshotError(
            .cannotCreate,
            "cannot create socket \(path): No such file or directory (create the directory, run under systemd with RuntimeDirectory=earshot, or choose another --socket)")
    }

    /// Opens the input file named by `[capture] input` or `--input` (nothing to do for a device or standard
    /// input) and reads its header, as the daemon does when it starts.
    ///
    /// - Throws: the decoder's ``EarshotError`` (its code kept: `.noInput` 66, `.data` 65), its message after
    ///   `PATH:LINE: [capture] input: ` for the file's key or `--input: ` for the flag.
    package func checkInputFile() throws(EarshotError) {
        guard case .file(let path) = capture.input else { return }
        do {
            _ = try AudioFileDecoder(url: URL(fileURLWithPath: path))
        } catch {
            let origin = locations["capture.input"]
            let prefix = origin == "--input" ? "--input" : origin.map { "\($0): [capture] input" } ?? "[capture] input"
            throw EarshotError(error.code, "\(prefix): \(error.message)", cause: error.cause)
        }
    }

    /// Opens the `--fallback-input FILE` and reads its header as ``checkInputFile()`` does for `--input`: the
    /// daemon streams it when the capture device cannot be opened at start, so a missing file, a directory or one
    /// that is not audio would otherwise only show when the device fails.
    ///
    /// - Throws: the decoder's ``EarshotError`` (its code kept: `.noInput` 66, `.data` 65), its message after
    ///   `--fallback-input: `, e.g. `--fallback-input: /srv/a.wav: no such file (check the path)`.
    package static func checkFallbackInput(_ path: String) throws(EarshotError) {
        do {
            _ = try AudioFileDecoder(url: URL(fileURLWithPath: path))
        } catch {
            throw EarshotError(error.code, "--fallback-input: \(error.message)", cause: error.cause)
        }
    }

    /// Checks that every path the daemon opens is of the right kind before anything opens it, so that a mistake is
    /// one line at start (and in `--check-config`) rather than a hang or a failure at the first event:
    /// - `[history] path` (with `[history] enabled`): a regular file, or missing (it is created);
    /// - `[clips] directory` (with `[clips] enabled`) and `[sleep] report_dir` (when ``sleepReportsExpected``): a
    ///   directory, or missing;
    /// - `[sleep] model`: an existing regular file;
    /// - `[output] socket` (or `--socket`): a socket or missing (a missing directory is the server's to report), not
    ///   a symbolic link;
    /// - `[history] path`, `[clips] directory` (with `[clips] enabled`) and `[sleep] report_dir` (when
    ///   ``sleepReportsExpected``): no symbolic link in
    ///   it, at its name or a directory above it (the history is opened without following one, ``EventHistory``;
    ///   ``ClipWriter`` and ``SleepService`` refuse one at each write, audit 14 F1).
    /// A FIFO, a device (`/dev/zero`) or a directory where a file belongs is refused: opening one could wait forever
    /// or read endless bytes. (Model files, `[models] files`, are read through ``RegularFile``, which refuses them
    /// without waiting.)
    ///
    /// - Throws: `EarshotError(.config)` (78) naming where the key was set, the path, its kind and the fix, e.g.
    ///   `/etc/earshot/earshotd.conf:3: [clips] directory = /srv/clips: is a regular file, not a directory (move
    ///   the file aside, or set [clips] directory to a directory, e.g. /var/lib/earshot/clips)`.
    package func checkStoragePaths() throws(EarshotError) {
        func refuse(_ key: String, _ path: String, _ what: String, _ fix: String) -> EarshotError {
            let origin = locations[key]
            let name = "[" + key.split(separator: ".", maxSplits: 1).joined(separator: "] ")
            let subject = origin == "--socket" ? "--socket \(path)" : "\(origin.map { "\($0): " } ?? "")\(name) = \(path)"
            return EarshotError(.config, "\(subject): \(what) (\(fix))")
        }
        // The writers refuse a link at their first write (trial 13 D1, audit 14 F1): said at start instead.
        func refuseLink(_ key: String, _ path: String, setting: String, contents: String, kind: String) throws(EarshotError) {
            guard let link = SymbolicLinks.first(in: path) else { return }
            let refusal = SymbolicLinks.refusal(path: path, link: link, setting: setting, contents: contents, kind: kind)
            throw refuse(key, path, refusal.what, refusal.fix)
        }
        if history.enabled {
            try refuseLink("history.path", history.path, setting: "[history] path", contents: "history", kind: "file")
            let kind = PathKind(path: history.path)
            if kind == .directory {
                throw refuse("history.path", history.path, "is a directory, not a database file", "set [history] path to a file, e.g. \(EventHistory.defaultPath)")
            }
            if kind != .missing, kind != .regularFile {
                throw refuse("history.path", history.path, "is \(kind.phrase), not a database file", "set [history] path to a regular file, e.g. \(EventHistory.defaultPath)")
            }
        }
        if clips.enabled {
            try refuseLink("clips.directory", clips.directory, setting: "[clips] directory", contents: "clips", kind: "directory")
        }
        let clipsKind = PathKind(path: clips.directory)
        if clips.enabled, clipsKind != .missing, clipsKind != .directory {
            let what = clipsKind == .regularFile ? "is a regular file, not a directory" : "is \(clipsKind.phrase), not a directory"
            throw refuse("clips.directory", clips.directory, what, "move the file aside, or set [clips] directory to a directory, e.g. \(Clips().directory)")
        }
        // Only when reports are looked for (audit 15 F3): a daemon whose sleep sessions nobody set up does not stop
        // over its default report directory; a session started by hand meets the writer's own refusal.
        if sleepReportsExpected {
            try refuseLink("sleep.report_dir", sleep.reportDirectory, setting: "[sleep] report_dir", contents: "sleep reports", kind: "directory")
        }
        let reportKind = PathKind(path: sleep.reportDirectory)
        if sleepReportsExpected, reportKind != .missing, reportKind != .directory {
            throw refuse("sleep.report_dir", sleep.reportDirectory, "is \(reportKind.phrase), not a directory", "set [sleep] report_dir to a directory, e.g. \(Sleep().reportDirectory)")
        }
        if let model = sleep.modelPath {
            let kind = PathKind(path: model)
            if kind == .missing {
                throw refuse("sleep.model", model, "no such file", "check the path, or leave [sleep] model empty for the built-in scores")
            }
            if kind != .regularFile {
                throw refuse("sleep.model", model, "is \(kind.phrase), not a regular file", "name a head model file made by earshot train")
            }
        }
        let socket = output.socketPath
        var socketStatus = stat()
        if lstat(socket, &socketStatus) == 0, socketStatus.st_mode & S_IFMT == S_IFLNK {
            // Not "a regular file" (its target's kind, or "missing" when it dangles): a link there may be planted.
            let directory = parentDirectory(of: socket)
            throw refuse("output.socket", socket, "is a symbolic link, not a socket",
                         "delete the link, which whoever may write in \(directory.isEmpty ? "." : directory) could have planted, or choose another socket path")
        }
        let socketKind = PathKind(path: socket)
        if socketKind != .missing, socketKind != .socket {
            throw refuse("output.socket", socket, "is \(socketKind.phrase), not a socket", "remove it, or choose another socket path")
        }
    }
}

extension DaemonConfiguration {
    /// Settings the daemon accepts but that do nothing, one line each naming where and the fix: `[notify] groups` or
    /// `[clips] groups` naming a group the daemon does not watch (its events never come), e.g.
    /// `/etc/earshot/earshotd.conf:9: [notify] groups: dog_bark is not watched, so it is never notified (add it to
    /// [detection] watch, or take it out of [notify] groups)`; then secrets every local user can read
    /// (``secretWarnings()``; run after ``readNotifyURLs()``). The daemon logs them at start; `--check-config`
    /// prints them.
    package func warnings() -> [String] {
        let watch = detection.watch
        var published = Set(watch).union([SnoreDetector.groupName])
        published.formUnion(AlarmDetector.extraGroups(watch: watch, patternDetection: alarms.patternDetection))
        // With pattern detection fire_alarm's events are smoke_alarm's.
        if alarms.patternDetection, !published.isDisjoint(with: [AlarmEvent.smokeAlarm, AlarmDetector.fireAlarm]) {
            published.formUnion([AlarmEvent.smokeAlarm, AlarmDetector.fireAlarm])
        }
        var lines: [String] = []
        for (section, groups, verb) in [("notify", notify.groups, "notified"), ("clips", clips.groups, "clipped")] {
            let unwatched = groups.filter { !published.contains($0) }
            guard !unwatched.isEmpty, section == "clips" ? clips.enabled : !notify.urls.isEmpty else { continue }
            let origin = locations["\(section).groups"].map { "\($0): " } ?? ""
            let names = unwatched.joined(separator: ", ")
            let one = unwatched.count == 1
            lines.append("\(origin)[\(section)] groups: \(names) \(one ? "is" : "are") not watched, so \(one ? "it is" : "they are") never \(verb) (add \(one ? "it" : "them") to [detection] watch, or take \(one ? "it" : "them") out of [\(section)] groups)")
        }
        return lines + secretWarnings()
    }

    /// What ``checkStoragePaths()`` lets through but the daemon cannot create at start, where it would run without
    /// storing (a `history_unavailable` or `clips_unavailable` health event, events lost): a `[history] path` or
    /// `[clips] directory` whose parent directory does not exist (the daemon creates the file or the last
    /// directory, not the ones above); a `[sleep] report_dir` that exists but takes no files
    /// (``SleepService/reportDirectoryProblem(_:)``, `sleep_report_unavailable` at start). One line each, e.g. `/etc/earshot/earshotd.conf:5: [history] path =
    /// /srv/x/h.sqlite3: its directory /srv/x does not exist, so no event would be stored (create it, or set
    /// [history] path)`.
    package func storageWarnings() -> [String] {
        func parent(_ path: String) -> String {
            let trimmed = path.hasSuffix("/") && path.count > 1 ? String(path.dropLast()) : path
            guard let slash = trimmed.lastIndex(of: "/") else { return "." }
            return slash == trimmed.startIndex ? "/" : String(trimmed[..<slash])
        }
        // The defaults are under the unit's StateDirectory, which systemd creates at start: only paths set in the
        // file (or on the command line) are checked.
        let storage = [
            (enabled: history.enabled, key: "history.path", setting: "[history] path", path: history.path,
             above: "its directory", lost: "no event would be stored"),
            (enabled: clips.enabled, key: "clips.directory", setting: "[clips] directory", path: clips.directory,
             above: "its parent directory", lost: "no clip would be saved"),
        ]
        var lines = storage.compactMap { item -> String? in
            guard item.enabled, let origin = locations[item.key], PathKind(path: item.path) == .missing,
                  PathKind(path: parent(item.path)) != .directory else { return nil }
            return "\(origin): \(item.setting) = \(item.path): \(item.above) \(parent(item.path)) does not exist, so \(item.lost) (create it, or set \(item.setting))"
        }
        // A report directory that exists but takes no files (read-only, immutable, full): the morning report would
        // be lost. Said by the daemon at start too (sleep_report_unavailable).
        if let problem = SleepService.reportDirectoryProblem(sleep.reportDirectory) {
            let origin = locations["sleep.report_dir"].map { "\($0): " } ?? ""
            lines.append("\(origin)[sleep] report_dir = \(sleep.reportDirectory): \(problem), so no sleep report would be written (make it writable by earshotd's user, or set [sleep] report_dir)")
        }
        return lines
    }
}
