import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport

/// Which feature extractor a classifier head was trained on: the backbone's name, the SHA-256 of its weights file
/// and its embedding size. A head is only valid on the exact backbone it was trained with (other weights give other
/// embeddings), so head files record this and ``ClassifierHead`` refuses a head whose identity differs.
public struct BackboneIdentity: Sendable, Equatable, Hashable, Codable {
    /// The backbone's name: `yamnet` for the built-in classifier.
    public var name: String
    /// SHA-256 of the backbone's weights file (`Models/yamnet.safetensors`), 64 lowercase hexadecimal digits.
    public var weightsSHA256: String
    /// Values per embedding: 1024 for YAMNet (the pooled output of its last block).
    public var embeddingSize: Int

    /// The built-in backbone's name.
    public static let yamnetName = "yamnet"

    public init(name: String, weightsSHA256: String, embeddingSize: Int) {
        self.name = name
        self.weightsSHA256 = weightsSHA256
        self.embeddingSize = embeddingSize
    }

    package enum CodingKeys: String, CodingKey {
        case name
        case weightsSHA256 = "weights_sha256"
        case embeddingSize = "embedding_size"
    }

    /// The first 12 hexadecimal digits of the hash, for messages.
    public var shortHash: String { String(weightsSHA256.prefix(12)) }

    private static let cached = Mutex<BackboneIdentity?>(nil)

    /// The identity of the weights this project ships (`Models/yamnet.safetensors`, written by
    /// `Models/convert-yamnet`), which the built-in heads (`builtin_*.earshot`) were trained on; a test checks it,
    /// and ``shippedYAMNetFingerprint``, against the file.
    public static let shippedYAMNet = BackboneIdentity(
        name: yamnetName, weightsSHA256: "d7d5546a2761c7fe6382e70ffd1162e1273eaa6a86beacec6c07b8e0373142d9",
        embeddingSize: 1024)
    /// `SHA256.sampledHex(ofFileAt:)` of the shipped weights (their size and 64 pieces of 4 KiB).
    package static let shippedYAMNetFingerprint = "2499a959b480e5c41da010cba3770b6e4df3e112625f35d247bd1e5bd70a830e"

    /// The built-in backbone's identity for checking the heads shipped with it: ``shippedYAMNet`` when the weights
    /// file has the shipped fingerprint (256 KiB read, under a millisecond), else ``builtIn()`` (the full digest,
    /// about 0.1 s, which the `baby_cry` preset's head would otherwise add to every start of the daemon).
    /// - Throws: as ``builtIn()``.
    public static func builtInForShippedHeads() throws(EarshotError) -> BackboneIdentity {
        if let known = cached.withLock({ $0 }) { return known }
        let path = try ModelLocator.builtInDirectory().appendingPathComponent(ModelLocator.weightsFileName).path
        if try SHA256.sampledHex(ofFileAt: path) == shippedYAMNetFingerprint { return shippedYAMNet }
        return try builtIn()
    }

    /// The identity of the built-in YAMNet: the SHA-256 of `yamnet.safetensors` in the directory
    /// `ModelLocator.builtInDirectory()` finds (the file `BuiltInClassifier.shared()` loads). Computed once per
    /// process (about 15 MB read) and cached. Thread-safe.
    /// - Throws: `EarshotError(.noInput)` when the weights file cannot be found or opened, `.io` when it cannot be
    ///   read; a later call tries again.
    public static func builtIn() throws(EarshotError) -> BackboneIdentity {
        try cached.withLock { (identity: inout BackboneIdentity?) throws(EarshotError) -> BackboneIdentity in
            if let identity { return identity }
            let path = try ModelLocator.builtInDirectory().appendingPathComponent(ModelLocator.weightsFileName).path
            let fresh = BackboneIdentity(
                name: yamnetName, weightsSHA256: try SHA256.hex(ofFileAt: path), embeddingSize: YAMNet.embeddingSize)
            identity = fresh
            return fresh
        }
    }
}
