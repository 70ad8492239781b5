import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport

/// A custom sound classifier: a small head (logistic regression or an MLP) on the built-in backbone's 1024-d
/// embeddings, trained by `earshot train` or `earshot enroll`, with its own class labels.
///
/// File format (`.earshot`, any name works): safetensors (an 8-byte little-endian header length, a JSON header,
/// then float32 little-endian tensors). Tensors, row-major `[inputs, outputs]`: `input.mean` and `input.scale`
/// `[1024]` (standardisation `(e - mean) * scale`), for an MLP `hidden.weight` `[1024, H]` and `hidden.bias` `[H]`,
/// then `output.weight` `[H or 1024, classes]` and `output.bias` `[classes]`; for heads made by `earshot enroll`
/// also the similarity gate, `prototype.embeddings` `[N, 1024]` and `prototype.gate` `[2]` (threshold, width; see
/// `HeadParameters`). The header's `__metadata__` holds
/// `format` = `earshot-head`, `earshot_head` = the ``HeadMetadata`` as JSON, and `weights_sha256` = the SHA-256 of
/// every byte after the header, so that a damaged or cut file is refused rather than giving wrong scores.
///
/// - Important: Immutable; share it across threads freely.
public final class ClassifierHead: Sendable {
    /// Labels, backbone, window, training record, metrics and suggested thresholds.
    public let metadata: HeadMetadata
    /// The file it was read from, or nil for a head made in memory.
    public let path: String?
    package let parameters: HeadParameters

    /// Value of `__metadata__.format`.
    package static let formatName = "earshot-head"
    /// Largest head file read, in bytes (an MLP with 4096 hidden units and 100 classes is about 18 MB).
    package static let maximumFileBytes = 256 << 20

    /// The class labels, index = output index.
    public var labels: [String] { metadata.labels }

    package init(metadata: HeadMetadata, parameters: HeadParameters, path: String? = nil) {
        self.metadata = metadata
        self.parameters = parameters
        self.path = path
    }

    /// Reads a head model file and checks that it was made for the built-in backbone installed here
    /// (`BackboneIdentity.builtIn()`).
    /// - Throws: as ``init(contentsOf:backbone:)``, and as `BackboneIdentity.builtIn()`.
    public convenience init(contentsOf url: URL) throws(EarshotError) {
        try self.init(contentsOf: url, backbone: try BackboneIdentity.builtIn())
    }

    /// Reads a head model file and checks that it was made for `backbone`.
    ///
    /// - Throws: ``EarshotError``, one line starting with the file's path:
    ///   `.noInput` when the file is missing, a directory or unreadable;
    ///   `.data` when it is damaged (too short, a header that is not safetensors JSON, tensor bytes that do not match
    ///   the SHA-256 recorded in it, a tensor missing or misshapen, a value that is not finite), when it is not an
    ///   Earshot head model, when it has a newer format version, or when it was trained on another backbone (another
    ///   name or other weights: its embeddings would mean nothing to this head).
    public init(contentsOf url: URL, backbone: BackboneIdentity) throws(EarshotError) {
        // Messages name the file as the caller gave it (`relativePath`), as the decoder's do.
        let path = url.relativePath
        let bytes = try Self.readFile(path)
        let (metadata, parameters) = try HeadFileCodec.decode(bytes, path: path)
        guard metadata.backbone == backbone else {
            let theirs = metadata.backbone
            throw EarshotError(
                .data,
                "head model \(path) was trained for backbone \"\(theirs.name)\" (weights sha256 \(theirs.shortHash), \(theirs.embeddingSize)-d embeddings); this installation runs \"\(backbone.name)\" (weights sha256 \(backbone.shortHash), \(backbone.embeddingSize)-d): train it again here with earshot train or earshot enroll")
        }
        self.metadata = metadata
        self.parameters = parameters
        self.path = url.path
    }

    /// Writes the head to `url` with ``OutputFile``: a new path or a regular file through a temporary file in the same
    /// directory renamed over it (a reader never sees half a file); a symbolic link's target, keeping the link; an
    /// existing device or FIFO in place, never replacing it.
    /// - Throws: `EarshotError(.cannotCreate)` naming the file when it cannot be written (`.io` when writing into a
    ///   device or FIFO fails).
    public func write(to url: URL) throws(EarshotError) {
        let bytes = try HeadFileCodec.encode(metadata: metadata, parameters: parameters)
        try OutputFile.write(Data(bytes), to: url.relativePath, what: "head model", hint: "check that the directory exists and is writable")
    }

    /// Class probabilities of embeddings.
    /// - Parameters:
    ///   - embeddings: `[count, 1024]` backbone embeddings (a window's mean over its 0.96 s patches).
    /// - Returns: `[count, labels.count]` probabilities in 0...1, each row summing to 1 (softmax).
    /// - Precondition: `embeddings.count == count * metadata.backbone.embeddingSize`.
    public func probabilities(embeddings: [Float], count: Int) -> [Float] {
        precondition(embeddings.count == count * parameters.inputSize, "embeddings must be [count, \(parameters.inputSize)]")
        return embeddings.withUnsafeBufferPointer { parameters.probabilities(embeddings: $0.baseAddress!, rows: count) }
    }

    /// Class probabilities of one embedding `[1024]`; `[labels.count]`, summing to 1. An embedding of the wrong size
    /// (e.g. the empty one of a gated window) gives an empty array.
    public func probabilities(embedding: [Float]) -> [Float] {
        guard embedding.count == parameters.inputSize else { return [] }
        return probabilities(embeddings: embedding, count: 1)
    }

    /// Reads a whole regular file of at most ``maximumFileBytes`` (never waiting on a FIFO: ``RegularFile``).
    /// - Throws: `.noInput` when it cannot be opened or is not a regular file (`cannot open head model PATH: is a
    ///   FIFO (named pipe), not a regular file`), `.data` when it is larger than any head model.
    package static func readFile(_ path: String) throws(EarshotError) -> [UInt8] {
        do {
            return try RegularFile.read(path, limit: maximumFileBytes)
        } catch {
            switch error {
            case .cannotOpen(let code): throw .posix(.noInput, "cannot open head model \(path)", errno: code)
            case .readFailed(let code): throw .posix(.noInput, "cannot read head model \(path)", errno: code)
            case .notRegularFile(.directory): throw .posix(.noInput, "cannot read head model \(path)", errno: EISDIR)
            case .notRegularFile:
                throw EarshotError(.noInput, "cannot open head model \(path): \(error.reason)")
            case .tooLarge(let bytes):
                throw EarshotError(.data, "head model \(path) is \(bytes) bytes, more than any head model (\(maximumFileBytes >> 20) MiB); is it the right file?")
            }
        }
    }
}

/// Encoding and decoding of head model files (see ``ClassifierHead`` for the layout).
package enum HeadFileCodec {
    package static let metadataKey = "earshot_head"
    package static let hashKey = "weights_sha256"
    package static let fix = "(copy it again, or train it again)"

    /// The file's bytes.
    /// - Throws: `EarshotError(.cannotCreate)` when the metadata cannot be encoded as JSON.
    package static func encode(metadata: HeadMetadata, parameters: HeadParameters) throws(EarshotError) -> [UInt8] {
        var data: [UInt8] = []
        var entries: [String: JSONValue] = [:]
        for tensor in parameters.tensors {
            let start = data.count
            for value in tensor.values {
                let bits = value.bitPattern.littleEndian
                data += [UInt8(truncatingIfNeeded: bits), UInt8(truncatingIfNeeded: bits >> 8),
                         UInt8(truncatingIfNeeded: bits >> 16), UInt8(truncatingIfNeeded: bits >> 24)]
            }
            entries[tensor.name] = .object([
                "data_offsets": .array([.int(start), .int(data.count)]), "dtype": .string("F32"),
                "shape": .array(tensor.shape.map { .int($0) }),
            ])
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let metadataJSON: String
        do {
            metadataJSON = String(decoding: try encoder.encode(metadata), as: UTF8.self)
        } catch {
            throw EarshotError(.cannotCreate, "cannot encode the head model's metadata: \(error)")
        }
        entries["__metadata__"] = .object(JSONObject([
            ("format", .string(ClassifierHead.formatName)), (metadataKey, .string(metadataJSON)),
            (hashKey, .string(SHA256.hex(of: data))),
        ].sorted { $0.0 < $1.0 }))
        // Keys sorted, as before (the file's bytes do not depend on dictionary order).
        let sorted = entries.keys.sorted().map { ($0, entries[$0]!) }
        var header = Array(JSONValue.object(JSONObject(uniqueEntries: sorted)).encoded.utf8)
        // Tensor data starts on an 8-byte boundary (safetensors pads the header with spaces).
        while (8 + header.count) % 8 != 0 { header.append(0x20) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(8 + header.count + data.count)
        let length = UInt64(header.count)
        for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: length >> UInt64(shift))) }
        bytes += header
        bytes += data
        return bytes
    }

    /// The metadata and weights in `bytes`; see ``ClassifierHead/init(contentsOf:backbone:)`` for what is refused.
    package static func decode(_ bytes: [UInt8], path: String) throws(EarshotError) -> (HeadMetadata, HeadParameters) {
        let damaged = "head model \(path) is damaged"
        guard bytes.count >= 8 else {
            throw EarshotError(.data, "\(damaged): \(bytes.count) bytes is too short for a safetensors file \(fix)")
        }
        // A safetensors header is JSON starting at byte 8; anything else is another kind of file (an audio file, the
        // configuration given in place of the model), not a damaged model.
        if bytes.count > 8, bytes[8] != UInt8(ascii: "{") {
            let audio = ["RIFF", "fLaC", "OggS", "ID3"].contains { bytes.starts(with: $0.utf8) }
            throw EarshotError(
                .data,
                "\(path) is not an Earshot head model (\(audio ? "an audio file" : "not a safetensors file")); give the .earshot file that earshot train or earshot enroll wrote")
        }
        var headerLength: UInt64 = 0
        for index in 0..<8 { headerLength |= UInt64(bytes[index]) << UInt64(8 * index) }
        guard headerLength >= 2, headerLength <= UInt64(bytes.count - 8) else {
            throw EarshotError(.data, "\(damaged): its header length (\(headerLength) bytes) does not fit the file's \(bytes.count) bytes \(fix)")
        }
        let dataStart = 8 + Int(headerLength)
        guard let header = try? JSONValue.parse(bytes[8..<dataStart]), header.objectValue != nil else {
            throw EarshotError(.data, "\(damaged): its header is not safetensors JSON \(fix)")
        }
        var fileMetadata: [String: String] = [:]
        for entry in header["__metadata__"]?.objectValue?.entries ?? [] {
            if let text = entry.value.stringValue { fileMetadata[entry.key] = text }
        }
        guard fileMetadata["format"] == ClassifierHead.formatName
        else {
            throw EarshotError(
                .data,
                "\(path) is not an Earshot head model (a safetensors file without \"format\": \"\(ClassifierHead.formatName)\" metadata); make one with earshot train or earshot enroll")
        }
        let data = Array(bytes[dataStart...])
        guard let recordedHash = fileMetadata[hashKey], recordedHash == SHA256.hex(of: data) else {
            throw EarshotError(.data, "\(damaged): its weights do not match the SHA-256 recorded in it \(fix)")
        }
        let metadata: HeadMetadata
        do {
            metadata = try JSONDecoder().decode(HeadMetadata.self, from: Data((fileMetadata[metadataKey] ?? "").utf8))
        } catch {
            if let version = Self.formatVersion(fileMetadata[metadataKey]), version > HeadMetadata.currentFormatVersion {
                throw newerFormat(path: path, version: version)
            }
            throw EarshotError(.data, "\(damaged): its \(metadataKey) metadata is not valid (\(Self.describe(error))) \(fix)")
        }
        guard metadata.formatVersion <= HeadMetadata.currentFormatVersion else {
            throw newerFormat(path: path, version: metadata.formatVersion)
        }
        let classes = metadata.labels.count
        let inputs = metadata.backbone.embeddingSize
        let hidden = metadata.classifier == .mlp ? (metadata.hiddenUnits ?? 0) : 0
        guard classes >= 2, Set(metadata.labels).count == classes, inputs >= 1, inputs <= 65_536,
              metadata.classifier == .logistic || (hidden >= 1 && hidden <= 65_536)
        else {
            throw EarshotError(.data, "\(damaged): its metadata gives \(classes) labels (at least 2, distinct), \(inputs) inputs and \(hidden) hidden units \(fix)")
        }
        var parameters = HeadParameters(inputSize: inputs, hiddenUnits: hidden, classCount: classes)
        func tensor(_ name: String, shape: [Int]) throws(EarshotError) -> [Float] {
            guard let entry = header[name], entry.objectValue != nil else {
                throw EarshotError(.data, "\(damaged): tensor \"\(name)\" is missing \(fix)")
            }
            let count = shape.reduce(1, *)
            guard entry["dtype"]?.stringValue == "F32", entry["shape"]?.intArrayValue == shape,
                  let offsets = entry["data_offsets"]?.intArrayValue, offsets.count == 2, offsets[0] >= 0,
                  offsets[1] - offsets[0] == count * 4, offsets[1] <= data.count
            else {
                throw EarshotError(.data, "\(damaged): tensor \"\(name)\" is not F32 \(shape) inside the file \(fix)")
            }
            var values = [Float](repeating: 0, count: count)
            for index in 0..<count {
                let at = offsets[0] + index * 4
                let bits = UInt32(data[at]) | UInt32(data[at + 1]) << 8 | UInt32(data[at + 2]) << 16 | UInt32(data[at + 3]) << 24
                let value = Float(bitPattern: bits)
                guard value.isFinite else {
                    throw EarshotError(.data, "\(damaged): tensor \"\(name)\" holds a value that is not finite \(fix)")
                }
                values[index] = value
            }
            return values
        }
        parameters.inputMean = try tensor("input.mean", shape: [inputs])
        parameters.inputScale = try tensor("input.scale", shape: [inputs])
        if hidden > 0 {
            parameters.hiddenWeights = try tensor("hidden.weight", shape: [inputs, hidden])
            parameters.hiddenBias = try tensor("hidden.bias", shape: [hidden])
        }
        parameters.outputWeights = try tensor("output.weight", shape: [parameters.outputInputs, classes])
        parameters.outputBias = try tensor("output.bias", shape: [classes])
        if let entry = header["prototype.embeddings"], entry.objectValue != nil {
            let shape = entry["shape"]?.intArrayValue ?? []
            guard shape.count == 2, shape[0] >= 1, shape[0] <= 100_000, shape[1] == inputs else {
                throw EarshotError(.data, "\(damaged): tensor \"prototype.embeddings\" has shape \(shape), expected [N, \(inputs)] \(fix)")
            }
            parameters.prototypes = try tensor("prototype.embeddings", shape: shape)
            let gate = try tensor("prototype.gate", shape: [2])
            guard gate[1] > 0 else {
                throw EarshotError(.data, "\(damaged): tensor \"prototype.gate\" has a width of \(gate[1]), expected > 0 \(fix)")
            }
            parameters.gateThreshold = gate[0]
            parameters.gateWidth = gate[1]
        }
        return (metadata, parameters)
    }

    private static func newerFormat(path: String, version: Int) -> EarshotError {
        EarshotError(
            .data,
            "head model \(path) has format version \(version); this Earshot reads version \(HeadMetadata.currentFormatVersion) (update Earshot, or train the head again with this one)")
    }

    /// The `format_version` field of metadata JSON that does not decode as a whole.
    private static func formatVersion(_ json: String?) -> Int? {
        guard let json, let object = try? JSONValue.parse(json) else { return nil }
        return object["format_version"]?.intValue
    }

    /// A decoding error in a few words.
    private static func describe(_ error: any Error) -> String {
        switch error as? DecodingError {
        case .keyNotFound(let key, _): "missing \(key.stringValue)"
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            context.codingPath.map(\.stringValue).joined(separator: ".").isEmpty
                ? "not JSON" : "bad \(context.codingPath.map(\.stringValue).joined(separator: "."))"
        default: "\(error)"
        }
    }
}
