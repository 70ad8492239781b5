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
    ///   those of ``checkStoragePaths()`` (78); with `[mqtt] enabled`, those of ``readMQTTPassword()`` (78) and
    ///   ``checkMQTTBroker(timeout:)`` (69 unreachable, 78 refused credentials), after which the line adds
    ///   `; the MQTT broker HOST:PORT accepted the connection`.
    package static func check(commandLine: DaemonCommandLine) throws(EarshotError) -> String {
        var configuration = try load(path: commandLine.configPath, overrides: commandLine.overrides)
        try configuration.readMQTTPassword()
        let models = try HeadModelSet.load(paths: configuration.models.files, locations: configuration.modelLocations).set
        _ = try configuration.resolvedGroups(classLabels: try BuiltInClassifier.shared().classLabels + models.classLabels)
        try configuration.checkStoragePaths()
        try configuration.checkInputFile()
        let broker = configuration.mqtt.enabled
            ? "; the MQTT broker \(try configuration.checkMQTTBroker()) accepted the connection" : ""
        return "configuration OK (watching \(configuration.detection.watch.joined(separator: ", ")))\(broker)"
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

    /// Checks that the places the daemon stores to are of the right kind, so that a mistake is one line at start
    /// rather than a failure at the first event: with `[history] enabled`, `[history] path` must not be a
    /// directory; with `[clips] enabled`, `[clips] directory` must be a directory when it exists. Paths that do not
    /// exist yet pass (the writers create them and report what stops them).
    ///
    /// - Throws: `EarshotError(.config)` (78) naming where the key was set, the path and the fix, e.g.
    ///   `/etc/earshot/earshotd.conf:3: [clips] directory = /srv/clips: is a regular file, not a directory (move
    ///   the file aside, or set [clips] directory to a directory, e.g. /var/lib/earshot/clips)`.
    package func checkStoragePaths() throws(EarshotError) {
        func origin(_ key: String) -> String {
            locations[key].map { "\($0): " } ?? ""
        }
        if history.enabled, PathKind(path: history.path) == .directory {
            throw EarshotError(
                .config,
                "\(origin("history.path"))[history] path = \(history.path): is a directory, not a database file (set [history] path to a file, e.g. \(EventHistory.defaultPath))")
        }
        let clipsKind = PathKind(path: clips.directory)
        if clips.enabled, clipsKind != .missing, clipsKind != .directory {
            let what = clipsKind == .regularFile ? "is a regular file, not a directory" : "is not a directory"
            throw EarshotError(
                .config,
                "\(origin("clips.directory"))[clips] directory = \(clips.directory): \(what) (move the file aside, or set [clips] directory to a directory, e.g. \(Clips().directory))")
        }
    }
}
