import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport

/// The custom models (``ClassifierHead`` files) the daemon runs beside the built-in classifier, each under a name:
/// its file name without the extension (`/var/lib/earshot/doorbell.earshot` is `doorbell`).
///
/// The backbone runs once per window; every head then scores the same window embedding. Detection groups name a
/// head's classes as `MODEL:LABEL` (e.g. `doorbell:ding`): ``classLabels`` lists them after YAMNet's 521 labels, and
/// ``extendedScores(yamnetScores:embedding:)`` gives the matching score vector, so label groups, thresholds and the
/// debouncer work the same for built-in and custom classes.
public struct HeadModelSet: Sendable {
    /// One loaded model.
    public struct Model: Sendable {
        /// `doorbell` for `/var/lib/earshot/doorbell.earshot`.
        public let name: String
        /// The file, as configured.
        public let path: String
        public let head: ClassifierHead
    }

    /// The models, in configuration order.
    public let models: [Model]

    /// No models.
    public init() {
        models = []
    }

    package init(models: [Model]) {
        self.models = models
    }

    /// `MODEL:LABEL` for every label of every model, in model order then label order.
    public var classLabels: [String] {
        models.flatMap { model in model.head.labels.map { "\(model.name):\($0)" } }
    }

    /// YAMNet's scores followed by each head's probabilities of `embedding`, in the order of ``classLabels``.
    /// - Parameters:
    ///   - yamnetScores: `[521]` scores of the window.
    ///   - embedding: `[1024]` embedding of the window (``ClassificationResult/embedding``).
    /// - Returns: `[521 + classLabels.count]`; a head gets zeros when the embedding has the wrong size.
    public func extendedScores(yamnetScores: [Float], embedding: [Float]) -> [Float] {
        guard !models.isEmpty else { return yamnetScores }
        var scores = yamnetScores
        for model in models {
            let probabilities = model.head.probabilities(embedding: embedding)
            scores += probabilities.count == model.head.labels.count
                ? probabilities : [Float](repeating: 0, count: model.head.labels.count)
        }
        return scores
    }

    /// Loads the model files `paths`.
    ///
    /// A file that fails to load (missing, damaged, made for another backbone) keeps the model of the same path in
    /// `previous`, when there is one: the failure is returned as a problem line and the old model goes on running.
    /// Without a previous model the failure is thrown.
    ///
    /// - Parameters:
    ///   - paths: model files; their names (``modelName(forPath:)``) must be distinct (the configuration checks).
    ///   - backbone: the running backbone's identity (`BackboneIdentity.builtIn()`).
    ///   - previous: the models running now (a reload), or nil (start-up).
    ///   - locations: where each path was named (`FILE:LINE`, `DaemonConfiguration.modelLocations`), to start the
    ///     message of a file that fails with.
    /// - Returns: the models, and one line per file that failed but whose previous model was kept.
    /// - Throws: the ``ClassifierHead/init(contentsOf:backbone:)`` error of a file that failed with nothing to keep,
    ///   its message after `FILE:LINE: [models] files: ` when `locations` has the path, and for a missing or
    ///   unreadable file (`.noInput`) ending with what to do.
    public static func load(
        paths: [String], backbone: BackboneIdentity, previous: HeadModelSet? = nil, locations: [String: String] = [:]
    ) throws(EarshotError) -> (set: HeadModelSet, problems: [String]) {
        var models: [Model] = []
        var problems: [String] = []
        for path in paths {
            let name = modelName(forPath: path)
            do {
                let head = try ClassifierHead(contentsOf: URL(fileURLWithPath: path), backbone: backbone)
                models.append(Model(name: name, path: path, head: head))
            } catch {
                guard let old = previous?.models.first(where: { $0.path == path }) else {
                    guard let place = locations[path] else { throw error }
                    let fix = error.code == .noInput ? " (check the path, or remove it from [models] files)" : ""
                    throw EarshotError(error.code, "\(place): [models] files: \(error.message)\(fix)", cause: error.cause)
                }
                problems.append("model \(name) not reloaded, the previous one keeps running: \(error.message)")
                models.append(old)
            }
        }
        return (HeadModelSet(models: models), problems)
    }

    /// Loads `paths` for the built-in backbone (whose identity, the SHA-256 of its weights, is computed only when
    /// there is a file; when every file is a head shipped beside the weights, `builtin_*.earshot` in the built-in
    /// model's directory, ``BackboneIdentity/builtInForShippedHeads()`` checks a fingerprint instead); see
    /// ``load(paths:backbone:previous:)``.
    /// - Throws: as ``load(paths:backbone:previous:)`` and `BackboneIdentity.builtIn()`.
    public static func load(paths: [String], previous: HeadModelSet? = nil, locations: [String: String] = [:])
        throws(EarshotError) -> (set: HeadModelSet, problems: [String])
    {
        guard !paths.isEmpty else { return (HeadModelSet(), []) }
        // Heads shipped beside the weights are checked against the shipped identity without hashing 15 MB.
        let directory = try ModelLocator.builtInDirectory()
        let shipped = paths.allSatisfy { isBuiltIn(path: $0, directory: directory) }
        let backbone = shipped ? try BackboneIdentity.builtInForShippedHeads() : try BackboneIdentity.builtIn()
        return try load(paths: paths, backbone: backbone, previous: previous, locations: locations)
    }

    /// Name prefix of the heads that ship with the built-in classifier (`builtin_baby_cry.earshot` beside
    /// `yamnet.safetensors`): a preset names their classes as `builtin_baby_cry:baby_cry`, and the file is loaded
    /// only when a group uses one of them (``builtInPaths(forClassLabels:directory:)``).
    public static let builtInPrefix = "builtin_"

    /// The built-in head files that `labels` name, once each in order of first use: `DIRECTORY/builtin_X.earshot`
    /// for every `builtin_X:LABEL`.
    public static func builtInPaths(forClassLabels labels: [String], directory: URL) -> [String] {
        var paths: [String] = []
        for label in labels where label.hasPrefix(builtInPrefix) {
            guard let colon = label.firstIndex(of: ":") else { continue }
            let path = directory.appendingPathComponent(String(label[..<colon]) + ".earshot").path
            if !paths.contains(path) { paths.append(path) }
        }
        return paths
    }

    /// Whether `path` is a head shipped with the built-in classifier: a `builtin_*` file in `directory` (the
    /// built-in model's), as ``builtInPaths(forClassLabels:directory:)`` names them.
    public static func isBuiltIn(path: String, directory: URL) -> Bool {
        let url = URL(fileURLWithPath: path).standardizedFileURL
        return url.lastPathComponent.hasPrefix(builtInPrefix)
            && url.deletingLastPathComponent().path == directory.standardizedFileURL.path
    }

    /// One line per model for the journal: its name, file, labels and training window, and a warning when the
    /// daemon's window (`windowDuration`, seconds) differs from the one it was trained on.
    /// The heads shipped with the built-in classifier (``isBuiltIn(path:directory:)``) are part of it: no line.
    public func notes(windowDuration: Double) -> [String] {
        listedModels.map { model in
            let metadata = model.head.metadata
            var line = "model \(model.name) (\(model.path)): classes " + model.head.labels.map { "\(model.name):\($0)" }.joined(separator: ", ")
                + ", trained \(metadata.trainedAt) on \(SettingRules.format(metadata.windowDuration)) s windows"
            if let mismatch = Self.windowMismatch(trained: metadata.windowDuration, analysed: windowDuration) {
                line += "; \(mismatch)"
            }
            return line
        }
    }

    /// One line per model trained on another window than `windowDuration` (seconds, the analysis window), for
    /// `earshotd --check-config` and `earshot detect`, e.g. `model kettle (/etc/earshot/kettle.earshot) was
    /// trained on 2 s windows; the daemon analyses 0.96 s windows, so its scores may be less reliable (set
    /// [analysis] window = 2)`. Empty when every window agrees; the built-in heads have no line.
    public func windowMismatches(windowDuration: Double) -> [String] {
        listedModels.compactMap { model in
            Self.windowMismatch(trained: model.head.metadata.windowDuration, analysed: windowDuration).map {
                "model \(model.name) (\(model.path)) was trained on \(SettingRules.format(model.head.metadata.windowDuration)) s windows; \($0)"
            }
        }
    }

    /// What a model trained on `trained` s windows risks under an analysis window of `analysed` s, or nil when
    /// they agree.
    public static func windowMismatch(trained: Double, analysed: Double) -> String? {
        guard abs(trained - analysed) > 1e-6 else { return nil }
        return "the daemon analyses \(SettingRules.format(analysed)) s windows, so its scores may be less reliable (set [analysis] window = \(SettingRules.format(trained)))"
    }

    /// The models of the set but the heads shipped with the built-in classifier.
    private var listedModels: [Model] {
        let directory = try? ModelLocator.builtInDirectory()
        return models.filter { model in directory.map { !Self.isBuiltIn(path: model.path, directory: $0) } ?? true }
    }

    /// A model's name: the file name without its last extension (`doorbell` for `/x/doorbell.earshot`).
    public static func modelName(forPath path: String) -> String {
        let file = URL(fileURLWithPath: path).lastPathComponent
        guard let dot = file.lastIndex(of: "."), dot != file.startIndex else { return file }
        return String(file[..<dot])
    }

    /// Why the model names of `paths` cannot be used, or nil: a name that is empty or holds `:` or `|` (the
    /// separators of `MODEL:LABEL` lists), or two files with the same name.
    public static func nameProblem(paths: [String]) -> String? {
        var seen: [String: String] = [:]
        for path in paths {
            let name = modelName(forPath: path)
            if name.isEmpty || name.contains(":") || name.contains("|") {
                return "model file \(path): its name \"\(name)\" cannot hold ':' or '|' or be empty (rename the file)"
            }
            if let other = seen[name] {
                return "model files \(other) and \(path) have the same name \"\(name)\" (classes are named MODEL:LABEL; rename one)"
            }
            seen[name] = path
        }
        return nil
    }
}
