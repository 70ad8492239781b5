import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// Small real head models for tests: seeded random weights of the real shapes.
enum HeadFixtures {
    static let fakeBackbone = BackboneIdentity(name: "yamnet", weightsSHA256: String(repeating: "ab", count: 32), embeddingSize: 8)

    /// A head over `backbone` with `labels`, weights drawn from `seed`.
    static func head(labels: [String] = ["background", "doorbell"], kind: HeadClassifierKind = .logistic,
                     backbone: BackboneIdentity = fakeBackbone, seed: UInt64 = 7) -> ClassifierHead {
        var random = SeededRandom(seed: seed)
        let hidden = kind == .mlp ? 5 : 0
        var parameters = HeadParameters(inputSize: backbone.embeddingSize, hiddenUnits: hidden, classCount: labels.count)
        func fill(_ values: inout [Float]) { for index in values.indices { values[index] = Float(random.gaussian()) } }
        fill(&parameters.inputMean)
        fill(&parameters.hiddenWeights)
        fill(&parameters.hiddenBias)
        fill(&parameters.outputWeights)
        fill(&parameters.outputBias)
        parameters.inputScale = parameters.inputScale.map { _ in Float(0.5 + random.unit()) }
        let record = TrainingRecord(method: "train", filesPerLabel: [labels[0]: 3, labels[1]: 4],
                                    windowsPerLabel: [labels[0]: 6, labels[1]: 8], seed: 1, validationFraction: 0.2,
                                    l2: 0.01, learningRate: 0.001, epochs: 12, bestEpoch: 9)
        let metadata = HeadMetadata(
            labels: labels, backgroundLabel: labels.contains("background") ? "background" : nil, classifier: kind,
            hiddenUnits: kind == .mlp ? hidden : nil, backbone: backbone, windowDuration: 0.96, overlapFactor: 0.5,
            trainedAt: Date(timeIntervalSince1970: 1_700_000_000), training: record, metrics: HeadMetrics(),
            suggestedThresholds: [labels[1]: 0.55])
        return ClassifierHead(metadata: metadata, parameters: parameters)
    }

    static func embeddings(rows: Int, columns: Int, seed: UInt64) -> [Float] {
        var random = SeededRandom(seed: seed)
        return (0..<(rows * columns)).map { _ in Float(random.unit() * 2) }
    }
}

@Suite("HeadModel")
struct HeadModelTests {
    // MARK: SHA-256

    @Test("SHA-256 gives the FIPS 180-4 example digests, whatever the update pieces")
    func sha256Vectors() {
        #expect(SHA256.hex(of: Array("".utf8)) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hex(of: Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        let twoBlocks = Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)
        #expect(SHA256.hex(of: twoBlocks) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        let million = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)
        #expect(SHA256.hex(of: million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        // 55, 56, 63 and 64 bytes sit at the padding boundaries; pieces of 1, 7 and 65 bytes cross block edges.
        for length in [55, 56, 63, 64, 65, 200] {
            let message = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            let whole = SHA256.hex(of: message)
            for piece in [1, 7, 65] {
                var hasher = SHA256()
                var start = 0
                while start < message.count {
                    hasher.update(message[start..<min(message.count, start + piece)])
                    start += piece
                }
                #expect(SHA256.hexString(hasher.finalize()) == whole, "length \(length), pieces of \(piece)")
            }
        }
    }

    @Test("the built-in backbone's identity is the SHA-256 of Models/yamnet.safetensors (as sha256sum prints it)")
    func backboneIdentity() throws {
        let identity = try BackboneIdentity.builtIn()
        #expect(identity.name == "yamnet")
        #expect(identity.embeddingSize == 1024)
        #expect(identity.weightsSHA256 == "d7d5546a2761c7fe6382e70ffd1162e1273eaa6a86beacec6c07b8e0373142d9")
        #expect(identity.shortHash == "d7d5546a2761")
    }

    // MARK: Files

    @Test("a saved head reads back with the same metadata and bit-identical probabilities", arguments: [HeadClassifierKind.logistic, .mlp])
    func roundTrip(kind: HeadClassifierKind) throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let head = HeadFixtures.head(kind: kind)
        let url = directory.appendingPathComponent("doorbell.earshot")
        try head.write(to: url)
        let loaded = try ClassifierHead(contentsOf: url, backbone: HeadFixtures.fakeBackbone)
        #expect(loaded.metadata == head.metadata)
        #expect(loaded.parameters == head.parameters)
        #expect(loaded.path == url.path)
        #expect(loaded.metadata.trainedAt == "2023-11-14T22:13:20Z")
        let embeddings = HeadFixtures.embeddings(rows: 5, columns: 8, seed: 3)
        let before = head.probabilities(embeddings: embeddings, count: 5)
        let after = loaded.probabilities(embeddings: embeddings, count: 5)
        #expect(before == after)
        #expect(before.count == 10)
        for row in 0..<5 { #expect(abs(before[row * 2] + before[row * 2 + 1] - 1) < 1e-6) }
        // No temporary file is left beside the model.
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["doorbell.earshot"])
    }

    @Test("probabilities are the softmax of the standardised embedding times the weights (hand-computed)")
    func probabilitiesByHand() {
        var parameters = HeadParameters(inputSize: 2, hiddenUnits: 0, classCount: 2)
        parameters.inputMean = [1, 2]
        parameters.inputScale = [2, 0.5]
        parameters.outputWeights = [1, -1, 0.5, 2]  // [2 inputs, 2 classes]
        parameters.outputBias = [0.25, -0.25]
        let metadata = HeadFixtures.head().metadata
        let head = ClassifierHead(metadata: metadata, parameters: parameters)
        // x = ((3 - 1) * 2, (6 - 2) * 0.5) = (4, 2); z = (4 * 1 + 2 * 0.5 + 0.25, 4 * -1 + 2 * 2 - 0.25) = (5.25, -0.25)
        let p = head.probabilities(embedding: [3, 6])
        let expected = 1 / (1 + exp(-5.5))
        #expect(abs(Double(p[0]) - expected) < 1e-6)
        #expect(abs(Double(p[1]) - (1 - expected)) < 1e-6)
        #expect(head.probabilities(embedding: [1, 2, 3]) == [])
    }

    @Test("the similarity gate of an enrolled head: kept in the file, and only windows like a prototype keep the sound's probability")
    func similarityGate() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let plain = HeadFixtures.head()
        var parameters = plain.parameters
        // Two prototypes along the first two axes; the gate passes half at similarity 0.8.
        parameters.prototypes = HeadParameters.unitRows([3, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0], columns: 8)
        parameters.gateThreshold = 0.8
        let gatedHead = ClassifierHead(metadata: plain.metadata, parameters: parameters)
        let url = directory.appendingPathComponent("gated.earshot")
        try gatedHead.write(to: url)
        let loaded = try ClassifierHead(contentsOf: url, backbone: HeadFixtures.fakeBackbone)
        #expect(loaded.parameters == parameters)
        #expect(loaded.parameters.prototypeCount == 2)
        #expect(loaded.parameters.prototypes[9] == 1)

        let near: [Float] = [5, 0.1, 0, 0, 0, 0, 0, 0]      // similarity 0.9998 to the first prototype
        let far: [Float] = [0, 0, 1, 1, 0, 0, 0, 0]         // similarity 0 to both
        let edge: [Float] = [0.8, 0.6, 0, 0, 0, 0, 0, 0]    // similarity exactly 0.8 to the first
        let similarities = loaded.parameters.similarities(embeddings: near + far + edge, rows: 3)
        #expect(abs(similarities[0] - 0.9998) < 1e-4)
        #expect(similarities[1] == 0)
        #expect(abs(similarities[2] - 0.8) < 1e-6)
        for (embedding, gate) in [(near, Float(1 / (1 + exp(-(0.9998 - 0.8) / 0.03)))), (far, Float(1 / (1 + exp(0.8 / 0.03)))), (edge, Float(0.5))] {
            let before = plain.probabilities(embedding: embedding), after = loaded.probabilities(embedding: embedding)
            #expect(abs(after[1] - before[1] * gate) < 1e-5)
            #expect(abs(after[0] + after[1] - 1) < 1e-6)
        }
    }

    @Test("damaged, foreign and mismatched files are refused with exact one-line errors")
    func refusals() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let d = directory.path
        let backbone = HeadFixtures.fakeBackbone
        func load(_ name: String, backbone: BackboneIdentity = backbone) -> EarshotError? {
            AudioTestFiles.error { () throws(EarshotError) in
                _ = try ClassifierHead(contentsOf: directory.appendingPathComponent(name), backbone: backbone)
            }
        }
        let good = directory.appendingPathComponent("good.earshot")
        try HeadFixtures.head().write(to: good)
        let bytes = try [UInt8](Data(contentsOf: good))

        let missing = load("missing.earshot")
        #expect(missing?.message == "cannot open head model \(d)/missing.earshot: No such file or directory")
        #expect(missing?.code == .noInput)
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("folder.earshot"), withIntermediateDirectories: false)
        #expect(load("folder.earshot")?.message == "cannot read head model \(d)/folder.earshot: Is a directory")

        try AudioTestFiles.write([1, 2, 3, 4, 5], to: directory.appendingPathComponent("short.earshot"))
        let short = load("short.earshot")
        #expect(short?.message == "head model \(d)/short.earshot is damaged: 5 bytes is too short for a safetensors file (copy it again, or train it again)")
        #expect(short?.code == .data)

        try AudioTestFiles.write(Array(bytes.prefix(100)), to: directory.appendingPathComponent("cut-header.earshot"))
        let headerLength = Int(bytes[0]) | Int(bytes[1]) << 8
        #expect(load("cut-header.earshot")?.message == "head model \(d)/cut-header.earshot is damaged: its header length (\(headerLength) bytes) does not fit the file's 100 bytes (copy it again, or train it again)")

        try AudioTestFiles.write(Array(bytes.dropLast(10)), to: directory.appendingPathComponent("cut.earshot"))
        #expect(load("cut.earshot")?.message == "head model \(d)/cut.earshot is damaged: its weights do not match the SHA-256 recorded in it (copy it again, or train it again)")

        var flipped = bytes
        flipped[flipped.count - 7] ^= 0x10
        try AudioTestFiles.write(flipped, to: directory.appendingPathComponent("flipped.earshot"))
        #expect(load("flipped.earshot")?.message == "head model \(d)/flipped.earshot is damaged: its weights do not match the SHA-256 recorded in it (copy it again, or train it again)")

        var garbled = bytes
        garbled[9] = UInt8(ascii: "#")
        try AudioTestFiles.write(garbled, to: directory.appendingPathComponent("garbled.earshot"))
        #expect(load("garbled.earshot")?.message == "head model \(d)/garbled.earshot is damaged: its header is not safetensors JSON (copy it again, or train it again)")

        // Another kind of file given as the model (trial 5 #10) is named as such, not as damaged.
        try AudioTestFiles.write(Array("RIFF\u{24}\u{7D}\0\0WAVEfmt ".utf8), to: directory.appendingPathComponent("knock.wav"))
        let wav = load("knock.wav")
        #expect(wav?.message == "\(d)/knock.wav is not an Earshot head model (an audio file); give the .earshot file that earshot train or earshot enroll wrote")
        #expect(wav?.code == .data)
        try AudioTestFiles.write(Array("[detection]\nwatch = dk_dog\n".utf8), to: directory.appendingPathComponent("dk.conf"))
        #expect(load("dk.conf")?.message == "\(d)/dk.conf is not an Earshot head model (not a safetensors file); give the .earshot file that earshot train or earshot enroll wrote")

        // The backbone's own weights file is safetensors, but not a head.
        let weights = try ModelLocator.builtInDirectory().appendingPathComponent("yamnet.safetensors")
        let foreign = AudioTestFiles.error { () throws(EarshotError) in _ = try ClassifierHead(contentsOf: weights, backbone: backbone) }
        #expect(foreign?.message == "\(weights.path) is not an Earshot head model (a safetensors file without \"format\": \"earshot-head\" metadata); make one with earshot train or earshot enroll")
        #expect(foreign?.code == .data)

        // Trained on other weights, or another backbone.
        let otherWeights = BackboneIdentity(name: "yamnet", weightsSHA256: String(repeating: "0123", count: 16), embeddingSize: 8)
        let mismatch = load("good.earshot", backbone: otherWeights)
        #expect(mismatch?.message == "head model \(d)/good.earshot was trained for backbone \"yamnet\" (weights sha256 abababababab, 8-d embeddings); this installation runs \"yamnet\" (weights sha256 012301230123, 8-d): train it again here with earshot train or earshot enroll")
        #expect(mismatch?.code == .data)
        let vggish = BackboneIdentity(name: "vggish", weightsSHA256: String(repeating: "ab", count: 32), embeddingSize: 8)
        try HeadFixtures.head(backbone: vggish).write(to: directory.appendingPathComponent("vggish.earshot"))
        #expect(load("vggish.earshot")?.message == "head model \(d)/vggish.earshot was trained for backbone \"vggish\" (weights sha256 abababababab, 8-d embeddings); this installation runs \"yamnet\" (weights sha256 abababababab, 8-d): train it again here with earshot train or earshot enroll")
        // On this installation, against the real backbone.
        let real = AudioTestFiles.error { () throws(EarshotError) in _ = try ClassifierHead(contentsOf: good) }
        #expect(real?.message == "head model \(d)/good.earshot was trained for backbone \"yamnet\" (weights sha256 abababababab, 8-d embeddings); this installation runs \"yamnet\" (weights sha256 d7d5546a2761, 1024-d): train it again here with earshot train or earshot enroll")
    }

    @Test("a file of a newer format version is refused with the version it has")
    func newerFormat() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let head = HeadFixtures.head()
        var metadata = head.metadata
        metadata.formatVersion = 2
        let url = directory.appendingPathComponent("future.earshot")
        try ClassifierHead(metadata: metadata, parameters: head.parameters).write(to: url)
        let error = AudioTestFiles.error { () throws(EarshotError) in
            _ = try ClassifierHead(contentsOf: url, backbone: HeadFixtures.fakeBackbone)
        }
        #expect(error?.message == "head model \(url.path) has format version 2; this Earshot reads version 1 (update Earshot, or train the head again with this one)")
    }

    // MARK: The daemon's model set

    @Test("model names, group names and extended scores")
    func modelSetNames() {
        #expect(HeadModelSet.modelName(forPath: "/var/lib/earshot/doorbell.earshot") == "doorbell")
        #expect(HeadModelSet.modelName(forPath: "kettle") == "kettle")
        #expect(HeadModelSet.modelName(forPath: "/x/.hidden") == ".hidden")
        #expect(HeadModelSet.nameProblem(paths: ["/a/doorbell.earshot", "/b/kettle.earshot"]) == nil)
        #expect(HeadModelSet.nameProblem(paths: ["/a/doorbell.earshot", "/b/doorbell.earshot"])
            == "model files /a/doorbell.earshot and /b/doorbell.earshot have the same name \"doorbell\" (classes are named MODEL:LABEL; rename one)")
        #expect(HeadModelSet.nameProblem(paths: ["/a/door:bell.earshot"])
            == "model file /a/door:bell.earshot: its name \"door:bell\" cannot hold ':' or '|' or be empty (rename the file)")
        #expect(HeadModelSet.suggestedGroupName(model: "doorbell", label: "doorbell") == "doorbell")
        #expect(HeadModelSet.suggestedGroupName(model: "Kitchen", label: "Kettle whistle!") == "kitchen_kettle_whistle")
        #expect(HeadModelSet.suggestedGroupName(model: "snoring", label: "snoring") == "snoring_custom")
    }

    @Test("a model that fails to reload keeps the previous one, and says why; with none to keep, the error is thrown")
    func reloadKeepsPrevious() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let backbone = HeadFixtures.fakeBackbone
        let doorbell = directory.appendingPathComponent("doorbell.earshot"), kettle = directory.appendingPathComponent("kettle.earshot")
        try HeadFixtures.head(labels: ["background", "ding"]).write(to: doorbell)
        try HeadFixtures.head(labels: ["background", "whistle"], kind: .mlp).write(to: kettle)
        let first = try HeadModelSet.load(paths: [doorbell.path, kettle.path], backbone: backbone)
        #expect(first.problems.isEmpty)
        #expect(first.set.classLabels == ["doorbell:background", "doorbell:ding", "kettle:background", "kettle:whistle"])
        let embedding = HeadFixtures.embeddings(rows: 1, columns: 8, seed: 11)
        let scores = first.set.extendedScores(yamnetScores: [0.5, 0.25], embedding: embedding)
        #expect(scores.count == 6)
        #expect(Array(scores[0..<2]) == [0.5, 0.25])
        #expect(Array(scores[2..<4]) == first.set.models[0].head.probabilities(embedding: embedding))
        #expect(first.set.extendedScores(yamnetScores: [0.5], embedding: []) == [0.5, 0, 0, 0, 0])

        // The doorbell file is damaged on disk; the kettle is retrained (new weights).
        try AudioTestFiles.write([0, 1, 2], to: doorbell)
        try HeadFixtures.head(labels: ["background", "whistle"], seed: 99).write(to: kettle)
        let second = try HeadModelSet.load(paths: [doorbell.path, kettle.path], backbone: backbone, previous: first.set)
        #expect(second.problems == ["model doorbell not reloaded, the previous one keeps running: head model \(doorbell.path) is damaged: 3 bytes is too short for a safetensors file (copy it again, or train it again)"])
        #expect(second.set.models[0].head === first.set.models[0].head)
        #expect(second.set.models[1].head !== first.set.models[1].head)
        #expect(second.set.models[1].head.metadata.classifier == .logistic)

        let error = AudioTestFiles.error { () throws(EarshotError) in
            _ = try HeadModelSet.load(paths: [doorbell.path], backbone: backbone)
        }
        #expect(error?.message == "head model \(doorbell.path) is damaged: 3 bytes is too short for a safetensors file (copy it again, or train it again)")
    }
}
