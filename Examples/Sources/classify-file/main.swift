// classify-file: the sounds in an audio file, with timestamps (Apple's "Classifying Sounds in an Audio File", and
// its "jump to the moment" use).
//
//   classify-file FILE [--top K]                      every window's top K classes, as the analysis goes
//   classify-file FILE --find LABEL [--threshold P]   the moments LABEL is heard (confidence >= P, default 0.5)
//   classify-file FILE --find LABEL --first           stop at the first one (cancelAnalysis)
//
// Swift concurrency form of the tutorial: `results` is an AsyncThrowingStream of ClassificationResult (the
// tutorial's observer, or its Combine subject), `analyze()` is awaited, and `cancelAnalysis()` ends both early.
import Earshot
import Foundation

struct Options {
    var file = ""
    var top = 3
    var find: String?
    var threshold = 0.5
    var first = false

    static let usage = "usage: classify-file FILE [--top K] [--find LABEL [--threshold P] [--first]]"

    init(_ arguments: [String]) throws {
        var rest = arguments[...]
        func value(_ name: String) throws -> String {
            guard let value = rest.popFirst() else { throw ExampleError("\(name) needs a value\n\(Self.usage)") }
            return value
        }
        while let argument = rest.popFirst() {
            switch argument {
            case "--top":
                guard let top = Int(try value(argument)), top >= 1 else { throw ExampleError("--top needs a count >= 1") }
                self.top = top
            case "--find": find = try value(argument)
            case "--threshold":
                guard let threshold = Double(try value(argument)), (0...1).contains(threshold) else {
                    throw ExampleError("--threshold needs a confidence in 0...1")
                }
                self.threshold = threshold
            case "--first": first = true
            case _ where argument.hasPrefix("-"): throw ExampleError("unknown option \(argument)\n\(Self.usage)")
            default:
                guard file.isEmpty else { throw ExampleError(Self.usage) }
                file = argument
            }
        }
        guard !file.isEmpty else { throw ExampleError(Self.usage) }
        if first && find == nil { throw ExampleError("--first needs --find LABEL") }
    }
}

struct ExampleError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// `12.48 s`
func seconds(_ value: Double) -> String { String(format: "%.2f s", value) }

/// One window's line: `12.48 s  Laughter 91.2%  Speech 20.1%  Giggle 9.3%`.
func line(_ result: ClassificationResult, top: Int) -> String {
    let classes = result.classifications.prefix(top).map { "\($0.identifier) \(String(format: "%.1f%%", $0.confidence * 100))" }
    return ([seconds(result.timeRange.start)] + classes).joined(separator: "  ")
}

do {
    let options = try Options(Array(CommandLine.arguments.dropFirst()))
    let request = try ClassifySoundRequest(classifierIdentifier: .version1)
    if let label = options.find, !request.knownClassifications.contains(label) {
        throw ExampleError("\"\(label)\" is not one of the classifier's \(request.knownClassifications.count) classes (e.g. \"Laughter\", \"Speech\", \"Dog\")")
    }
    let analyzer = try AudioFileAnalyzer(url: URL(fileURLWithPath: options.file))
    try analyzer.add(request)
    // Make the stream before the analysis starts, so that it gets every result.
    let results = analyzer.results(for: request)
    let analysis = Task { try await analyzer.analyze() }

    /// A run of windows where the label is heard.
    var moment: (start: Double, end: Double, peak: Double)?
    var moments: [(start: Double, end: Double, peak: Double)] = []
    func close() {
        guard let open = moment else { return }
        print("\(options.find!) from \(seconds(open.start)) to \(seconds(open.end)) (peak \(String(format: "%.1f%%", open.peak * 100)))")
        moments.append(open)
        moment = nil
    }
    do {
        for try await result in results {
            guard let label = options.find else {
                print(line(result, top: options.top))
                continue
            }
            let confidence = result.classification(forIdentifier: label)?.confidence ?? 0
            if confidence >= options.threshold {
                if options.first {
                    print("\(label) at \(seconds(result.timeRange.start)) (\(String(format: "%.1f%%", confidence * 100))): jump there")
                    analyzer.cancelAnalysis()  // the stream now throws CancellationError, and so does analyze()
                    continue
                }
                if let open = moment, result.timeRange.start <= open.end {
                    moment = (open.start, result.timeRange.end, max(open.peak, confidence))
                } else {
                    close()
                    moment = (result.timeRange.start, result.timeRange.end, confidence)
                }
            }
        }
        close()
        try await analysis.value
        if let label = options.find {
            if let first = moments.first {
                print("\(label): \(moments.count) moment\(moments.count == 1 ? "" : "s"); jump to \(seconds(first.start))")
            } else {
                print("\(label): not heard (threshold \(options.threshold))")
            }
        }
    } catch is CancellationError {
        _ = await analysis.result
        print("stopped at the first moment (analysis cancelled)")
    }
} catch {
    FileHandle.standardError.write(Data("classify-file: \(error)\n".utf8))
    exit(1)
}
