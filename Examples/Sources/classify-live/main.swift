// classify-live: live audio buffers from a capture device, classified as they arrive, top classes printed (Apple's
// "Classifying Sounds in an Audio Stream", and the live-buffer tutorial's microphone example).
//
//   classify-live [--device PCM] [--seconds N] [--top K]          an ALSA capture device (default: "default")
//   classify-live --file FILE [--speed X] [--seconds N] [--top K] a file standing in for the device, in real time
//                                                                  (X times faster with --speed)
//
// The capture thread fills a ring buffer; this program's main thread reads it and hands each buffer to an
// AudioStreamAnalyzer with its frame position; a task prints the analyzer's `results` stream (the tutorial's Combine
// subject) as windows complete: one line per 0.48 s once the first 0.975 s are in.
import Earshot
import Foundation
import Synchronization

struct Options {
    var device = "default"
    var file: String?
    var speed = 1.0
    var seconds: Double?
    var top = 3

    static let usage = "usage: classify-live [--device PCM | --file FILE [--speed X]] [--seconds N] [--top K]"

    init(_ arguments: [String]) throws {
        var rest = arguments[...]
        func number(_ name: String) throws -> Double {
            guard let text = rest.popFirst(), let value = Double(text), value > 0 else {
                throw ExampleError("\(name) needs a number above 0\n\(Self.usage)")
            }
            return value
        }
        while let argument = rest.popFirst() {
            switch argument {
            case "--device":
                guard let device = rest.popFirst() else { throw ExampleError("--device needs a PCM name") }
                self.device = device
            case "--file":
                guard let file = rest.popFirst() else { throw ExampleError("--file needs a path") }
                self.file = file
            case "--speed": speed = try number(argument)
            case "--seconds": seconds = try number(argument)
            case "--top": top = max(1, Int(try number(argument)))
            default: throw ExampleError("unknown argument \(argument)\n\(Self.usage)")
            }
        }
    }
}

struct ExampleError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

do {
    let options = try Options(Array(CommandLine.arguments.dropFirst()))
    let source: any CaptureSource
    if let file = options.file {
        source = try RealtimeFileSource(path: file, pacing: .clock(speed: options.speed))
    } else {
        source = try PCMCapture(configuration: CaptureConfiguration(device: options.device))
    }
    let rate = source.format.sampleRate
    FileHandle.standardError.write(Data("classify-live: listening to \(source.name) (\(source.format))\n".utf8))

    // The capture thread writes mono chunks here and wakes this thread. A device's ring holds 4 s (the analysis keeps
    // up with real time many times over); a file replayed faster than that (--speed) gets a minute.
    let written = DispatchSemaphore(value: 0)
    let ringSeconds = options.file == nil ? 4 : 64
    let ring = SampleRingBuffer(minimumCapacity: rate * ringSeconds, sampleRate: rate, didWrite: { written.signal() })
    let ended = Mutex<CaptureEnd?>(nil)
    try source.start(into: ring, startingAt: 0, queue: DispatchQueue(label: "capture-end")) { end in
        ended.withLock { $0 = end }
        written.signal()
    }

    let analyzer = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: Double(rate), channelCount: 1))
    try analyzer.add(try ClassifySoundRequest(classifierIdentifier: .version1))
    let results = analyzer.results
    let top = options.top
    let printer = Task {
        for try await result in results {
            let classes = result.classifications.prefix(top).map {
                "\($0.identifier) \(String(format: "%.1f%%", $0.confidence * 100))"
            }
            print(([String(format: "%.2f-%.2f s", result.timeRange.start, result.timeRange.end)] + classes)
                .joined(separator: "  "))
        }
    }

    // Read the ring until the source ends (a file) or --seconds of audio have been analyzed.
    let limit = options.seconds.map { Int64($0 * Double(rate)) } ?? Int64.max
    var buffer = [Float](repeating: 0, count: rate / 2)
    var framesAnalyzed: Int64 = 0
    reading: while framesAnalyzed < limit {
        let chunk = buffer.withUnsafeMutableBufferPointer { ring.readChunk(into: $0) }
        if chunk.count == 0 {
            if ended.withLock({ $0 }) != nil { break reading }
            _ = written.wait(timeout: .now() + 0.25)
            continue
        }
        let count = Int(min(Int64(chunk.count), limit - framesAnalyzed))
        buffer.withUnsafeBufferPointer {
            analyzer.analyze(UnsafeBufferPointer(rebasing: $0[0..<count]), atAudioFramePosition: chunk.framePosition)
        }
        framesAnalyzed += Int64(count)
    }
    source.stop(timeout: 2)
    analyzer.completeAnalysis()  // the last windows, then the results stream ends
    try await printer.value
    if case .failed(let error) = ended.withLock({ $0 }) {
        throw error
    }
    let analyzed = String(format: "%.2f", Double(framesAnalyzed) / Double(rate))
    FileHandle.standardError.write(Data("classify-live: \(analyzed) s analyzed, \(ring.overrunCount) overruns\n".utf8))
} catch {
    FileHandle.standardError.write(Data("classify-live: \(error)\n".utf8))
    exit(1)
}
