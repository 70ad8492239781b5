import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotModel
import EarshotOutputs
import EarshotService
import EarshotTools

/// Custom models in the daemon: the `[models]` section, groups over `MODEL:LABEL` classes, detections from a head
/// through the real `earshotd`, and SIGHUP reloads that keep a model whose file went bad.
@Suite(.serialized) struct DaemonHeadsTests {
    // MARK: The built-in head

    @Test("the shipped baby-cry head was trained on the shipped weights: identity and fingerprint match the file")
    func shippedHead() throws {
        let directory = try ModelLocator.builtInDirectory()
        let weights = directory.appendingPathComponent(ModelLocator.weightsFileName).path
        #expect(try BackboneIdentity.builtIn() == BackboneIdentity.shippedYAMNet)
        #expect(try SHA256.sampledHex(ofFileAt: weights) == BackboneIdentity.shippedYAMNetFingerprint)
        #expect(try BackboneIdentity.builtInForShippedHeads() == BackboneIdentity.shippedYAMNet)
        let head = try ClassifierHead(
            contentsOf: directory.appendingPathComponent("builtin_baby_cry.earshot"), backbone: .shippedYAMNet)
        #expect(head.labels == ["baby_cry", "background"])
        #expect(head.metadata.backbone == BackboneIdentity.shippedYAMNet)
        // A small file is fingerprinted whole: its size and bytes.
        let small = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-fingerprint-\(getpid())")
        try Data("abc".utf8).write(to: small)
        defer { try? FileManager.default.removeItem(at: small) }
        var expected = SHA256()
        withUnsafeBytes(of: UInt64(3).littleEndian) { expected.update($0) }
        expected.update(Array("abc".utf8))
        #expect(try SHA256.sampledHex(ofFileAt: small.path) == SHA256.hexString(expected.finalize()))
    }

    // MARK: Configuration

    @Test("[models] files: absolute paths separated by |, continued on indented lines, names distinct")
    func modelsSection() throws {
        let text = """
            [models]
            files = /var/lib/earshot/doorbell.earshot | /var/lib/earshot/kettle.earshot
                /opt/models/fan.v2.earshot

            [group.doorbell]
            classes = doorbell:ding | kettle:whistle
            threshold = 0.6

            [detection]
            watch = doorbell | smoke_alarm
            """
        let configuration = try DaemonConfiguration.parse(text, source: "models.conf")
        #expect(configuration.models.files == ["/var/lib/earshot/doorbell.earshot", "/var/lib/earshot/kettle.earshot", "/opt/models/fan.v2.earshot"])
        #expect(DaemonConfiguration().models.files == [])
        let labels = ClassMapFixture.labels + ["doorbell:background", "doorbell:ding", "kettle:background", "kettle:whistle"]
        let groups = try configuration.resolvedGroups(classLabels: labels)
        #expect(groups.map(\.name) == ["doorbell", "smoke_alarm"])
        #expect(groups[0].classLabels == ["doorbell:ding", "kettle:whistle"])
        let engine = try DetectionEngine(groups: groups, watchList: groups.map(\.name), classLabels: labels)
        #expect(engine.watched[0].classIndices == [522, 524])

        func error(_ text: String) -> String? {
            AudioTestFiles.error { () throws(EarshotError) in _ = try DaemonConfiguration.parse(text, source: "m.conf") }?.message
        }
        #expect(error("[models]\nfiles = doorbell.earshot\n")
            == "m.conf:2: [models] files = doorbell.earshot: \"doorbell.earshot\" must be an absolute path (e.g. /var/lib/earshot/doorbell.earshot)")
        #expect(error("[models]\nfiles = /a/doorbell.earshot\n  /b/doorbell.earshot\n")
            == "m.conf:3: [models] files = /b/doorbell.earshot: model files /a/doorbell.earshot and /b/doorbell.earshot have the same name \"doorbell\" (classes are named MODEL:LABEL; rename one)")
        let typo = AudioTestFiles.error { () throws(EarshotError) in
            _ = try DaemonConfiguration.parse(
                "[detection]\nwatch = bell\n[group.bell]\nclasses = doorbell:dingg\nthreshold = 0.5\n", source: "t.conf")
                .resolvedGroups(classLabels: labels)
        }
        #expect(typo?.message == "t.conf:4: [group.bell] classes: unknown class \"doorbell:dingg\" (nearest: \"doorbell:ding\"; model doorbell's labels: doorbell:background, doorbell:ding)")
        // With the default watch list, baby_cry's class is the built-in head's, which these labels lack.
        let noHead = AudioTestFiles.error { () throws(EarshotError) in
            _ = try DaemonConfiguration().resolvedGroups(classLabels: labels)
        }
        #expect(noHead?.message == "group baby_cry: preset class \"builtin_baby_cry:baby_cry\" is not a label of this classifier (no model named builtin_baby_cry is loaded; add its file to [models] files; set classes in [group.baby_cry])")
        // A plain word is matched by the words it shares; a model that is not loaded is named (trial 5 #12).
        func unknown(_ classes: String) -> String? {
            AudioTestFiles.error { () throws(EarshotError) in
                _ = try DaemonConfiguration.parse(
                    "[detection]\nwatch = x\n[group.x]\nclasses = \(classes)\nthreshold = 0.5\n", source: "c.conf")
                    .resolvedGroups(classLabels: labels)
            }?.message
        }
        #expect(unknown("Dog barking") == "c.conf:4: [group.x] classes: unknown class \"Dog barking\" (nearest: \"Dog\"; `earshot classes` lists the 521 built-in classes)")
        #expect(unknown("dk:dog") == "c.conf:4: [group.x] classes: unknown class \"dk:dog\" (no model named dk is loaded; add its file to [models] files)")
    }

    // MARK: The daemon

    /// A head trained on generated audio: `tone` (1-3 kHz whistles over faint noise) against `background` (noise).
    static let toneModel: Result<URL, EarshotError> = {
        do throws(EarshotError) {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-heads-daemon-\(getpid())")
            ProcessScratch.removeAtExit(directory)
            let data = directory.appendingPathComponent("data")
            do {
                try HeadTrainingTests.writeFiles(data, label: "tone", count: 4) { index in
                    let tone = AnalysisTestSupport.sine(frequency: 1_000 + 500 * Double(index), dbfs: -20, sampleRate: 16_000, count: 19_200)
                    return zip(tone, HeadTrainingTests.noise(count: 19_200, dbfs: -45, seed: UInt64(index))).map { $0 + $1 }
                }
                try HeadTrainingTests.writeFiles(data, label: "background", count: 4) { index in
                    HeadTrainingTests.noise(count: 19_200, dbfs: -40 + 5 * Double(index), seed: UInt64(200 + index))
                }
            } catch {
                throw EarshotError(.cannotCreate, "cannot write the test recordings: \(error)")
            }
            var configuration = TrainingConfiguration()
            configuration.validationFraction = 0.25
            configuration.threads = 2
            let report = try HeadTraining.train(folder: data, configuration: configuration)
            let model = directory.appendingPathComponent("tone.earshot")
            try report.head.write(to: model)
            return .success(model)
        } catch {
            return .failure(error)
        }
    }()

    /// 3.5 s of faint noise with a 2.1 kHz whistle from 1.0 to 2.5 s, written beside the model.
    static func writeRecording(beside model: URL) throws -> URL {
        var samples = HeadTrainingTests.noise(count: 56_000, dbfs: -45, seed: 555)
        let whistle = AnalysisTestSupport.sine(frequency: 2_100, dbfs: -20, sampleRate: 16_000, count: 24_000)
        for index in whistle.indices { samples[16_000 + index] += whistle[index] }
        let url = model.deletingLastPathComponent().appendingPathComponent("recording.wav")
        try AnalysisTestSupport.writeFloatWAV(samples, sampleRate: 16_000, to: url)
        return url
    }

    static func configuration(model: String) -> String {
        """
        [models]
        files = \(model)

        [group.whistle]
        classes = tone:tone
        threshold = 0.5
        onset_windows = 1
        onset_of = 1
        hold_seconds = 1

        [detection]
        watch = whistle
        """
    }

    /// Starts the real earshotd in the foreground on the whistle recording with the tone model watched; a watchdog
    /// terminates it after 60 s.
    static func startOnWhistle(model: URL, sandbox: DaemonEndToEndTests.Sandbox) throws
        -> (daemon: Process, config: URL, out: Pipe, err: Pipe, watchdog: DispatchWorkItem)
    {
        let recording = try writeRecording(beside: model)
        let config = sandbox.directory.appendingPathComponent("earshotd.conf")
        try configuration(model: model.path).write(to: config, atomically: true, encoding: .utf8)
        let daemon = Process()
        daemon.executableURL = DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = ["--config", config.path, "--input", recording.path, "--socket", sandbox.socket, "--foreground"]
        daemon.environment = DaemonEndToEndTests.environment(home: sandbox.home)
        let out = Pipe(), err = Pipe()
        daemon.standardOutput = out
        daemon.standardError = err
        try daemon.run()
        let watchdog = DispatchWorkItem { if daemon.isRunning { daemon.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + 60, execute: watchdog)
        return (daemon, config, out, err, watchdog)
    }

    @Test("a custom model's class raises a detection in the real daemon, at the whistle's stream time")
    func detectionFromHead() throws {
        let model = try Self.toneModel.get()
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let (daemon, _, out, err, watchdog) = try Self.startOnWhistle(model: model, sandbox: sandbox)
        daemon.waitUntilExit()  // 3.5 s streamed in real time, then the daemon exits
        watchdog.cancel()
        #expect(daemon.terminationStatus == 0)
        let log = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(log.contains("earshotd: model tone (\(model.path)): classes tone:background, tone:tone, trained "), "\(log)")
        let events = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .split(separator: "\n").map { DaemonEndToEndTests.parse(String($0)) }
        let onsets = events.filter { $0["type"] as? String == "detection" }
        #expect(onsets.count == 1, "\(events)")
        let onset = try #require(onsets.first)
        #expect(onset["group"] as? String == "whistle")
        #expect(onset["class"] as? String == "tone:tone")
        // The whistle sounds from 1.0 to 2.5 s: the window starting at 0.48 s (to 1.455 s) already holds 0.455 s of
        // it, and the window starting at 2.40 s its last 0.1 s; the one at 2.88 s none.
        #expect(onset["stream_time"] as? Double == 0.48)
        let end = try #require(events.first { $0["type"] as? String == "detection_end" })
        #expect(end["group"] as? String == "whistle")
        #expect(end["start"] as? Double == 0.48)
        #expect(end["end"] as? Double == 3.36)
        #expect(end["windows"] as? Int == 5)
    }

    @Test("SIGHUP during an event: an unchanged configuration leaves it whole; a new gate ends it with reason reload",
          arguments: [false, true])
    func reloadDuringAnEvent(changeGate: Bool) throws {
        let model = try Self.toneModel.get()
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let (daemon, config, out, err, watchdog) = try Self.startOnWhistle(model: model, sandbox: sandbox)
        var collected = ""
        #expect(DaemonEndToEndTests.waitForLine("\"type\":\"detection\"", in: out.fileHandleForReading, seconds: 30, collected: &collected))
        if changeGate {
            try (Self.configuration(model: model.path) + "\n[analysis]\ngate_dbfs = -60\n").write(to: config, atomically: true, encoding: .utf8)
        }
        kill(daemon.processIdentifier, SIGHUP)
        daemon.waitUntilExit()
        watchdog.cancel()
        #expect(daemon.terminationStatus == 0)
        collected += String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let log = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(log.contains("earshotd: configuration reloaded: watching whistle"), "\(log)")
        let ends = collected.split(separator: "\n").map { DaemonEndToEndTests.parse(String($0)) }
            .filter { $0["type"] as? String == "detection_end" }
        let first = try #require(ends.first, "\(collected)")
        #expect(first["start"] as? Double == 0.48)
        if changeGate {
            #expect(first["reason"] as? String == "reload")
        } else {
            // The same event as without the reload (detectionFromHead).
            #expect(ends.count == 1, "\(collected)")
            #expect(first["end"] as? Double == 3.36)
            #expect(first["windows"] as? Int == 5)
            #expect(first["reason"] as? String != "reload")
        }
    }

    @Test("SIGHUP: a model whose file went bad keeps running and the journal says why; a bad model at start stops the daemon")
    func reloadKeepsModel() throws {
        let trained = try Self.toneModel.get()
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let model = sandbox.directory.appendingPathComponent("tone.earshot")
        try FileManager.default.copyItem(at: trained, to: model)
        let config = sandbox.directory.appendingPathComponent("earshotd.conf")
        try Self.configuration(model: model.path).write(to: config, atomically: true, encoding: .utf8)
        let daemon = Process()
        daemon.executableURL = DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = ["--config", config.path, "--device", "hw:97,0", "--socket", sandbox.socket, "--no-journal"]
        daemon.environment = DaemonEndToEndTests.environment(home: sandbox.home)
        let err = Pipe()
        daemon.standardError = err
        try daemon.run()
        defer { if daemon.isRunning { daemon.terminate() } }
        var log = ""
        #expect(DaemonEndToEndTests.waitForLine("capture_unavailable", in: err.fileHandleForReading, seconds: 30, collected: &log), "\(log)")

        try Data([1, 2, 3]).write(to: model)
        kill(daemon.processIdentifier, SIGHUP)
        let kept = "earshotd: model tone not reloaded, the previous one keeps running: head model \(model.path) is damaged: 3 bytes is too short for a safetensors file (copy it again, or train it again)\n"
        #expect(DaemonEndToEndTests.waitForLine(kept, in: err.fileHandleForReading, seconds: 30, collected: &log), "\(log) (running: \(daemon.isRunning))")
        #expect(DaemonEndToEndTests.waitForLine("earshotd: configuration reloaded: watching whistle\n", in: err.fileHandleForReading, seconds: 10, collected: &log), "\(log)")
        #expect(daemon.isRunning)
        // The status reply lists the model still running, with its file.
        let status = try #require(DaemonBenchmark.statusReply(socketPath: sandbox.socket))
        let models = try #require(status["models"]?.arrayValue)
        #expect(models.count == 1)
        #expect(models.first?["name"]?.stringValue == "tone")
        #expect(models.first?["path"]?.stringValue == model.path)
        daemon.terminate()
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 0)

        // At start there is no previous model to keep.
        let start = Process()
        start.executableURL = daemon.executableURL
        start.arguments = daemon.arguments
        start.environment = daemon.environment
        let startErr = Pipe()
        start.standardError = startErr
        try start.run()
        start.waitUntilExit()
        #expect(start.terminationStatus == 65)
        let startLog = String(decoding: startErr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(startLog == "earshotd: \(config.path):2: [models] files: head model \(model.path) is damaged: 3 bytes is too short for a safetensors file (copy it again, or train it again)\n")

        // A missing model file: where it is named, and what to do.
        try FileManager.default.removeItem(at: model)
        let missing = try #require(try EarshotdRun.run(["--config", config.path, "--check-config"]))
        #expect(missing.status == 66)
        #expect(missing.error == "earshotd: \(config.path):2: [models] files: cannot open head model \(model.path): No such file or directory (check the path, or remove it from [models] files)\n")
    }
}
