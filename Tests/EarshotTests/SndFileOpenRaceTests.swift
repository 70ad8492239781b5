import Foundation
import Synchronization
import Testing
import EarshotSupport
import EarshotAudio

/// libsndfile's error of a failed open is one variable for the whole process, which every open sets (a successful
/// one to "No Error"): files opened on several threads at once must still get their own error line.
@Suite("libsndfile opens on many threads")
struct SndFileOpenRaceTests {
    @Test("A file that is not audio gets its exact line while other threads open good WAVs (no \"No Error\")")
    func errorLinesUnderConcurrentOpens() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let bad = directory.appendingPathComponent("notes.wav")
        try AudioTestFiles.write(Array("not audio at all\n".utf8), to: bad)
        let good = directory.appendingPathComponent("good.wav")
        try AudioTestFiles.write(AudioTestFiles.wav(
            formatTag: 1, channels: 1, sampleRate: 16_000, bitsPerSample: 16,
            data: AudioTestFiles.littleEndian((0..<160).map { Int64($0) }, width: 2)), to: good)
        let expected = "\(bad.path): not an audio file libsndfile can read (Format not recognised; use WAV, FLAC, Ogg or MP3)"

        let rounds = 4_000
        let wrong = Mutex<[String]>([])
        let goodFailures = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for _ in 0..<rounds {
                if thread % 2 == 0 {
                    do throws(EarshotError) {
                        _ = try AudioFileDecoder(url: bad)
                        wrong.withLock { $0.append("opened") }
                    } catch {
                        if error.message != expected { wrong.withLock { $0.append(error.message) } }
                    }
                } else if (try? AudioFileDecoder(url: good)) == nil {
                    goodFailures.wrappingAdd(1, ordering: .relaxed)
                }
            }
        }
        let lines = wrong.withLock { $0 }
        #expect(lines.isEmpty, "\(lines.count) of \(2 * rounds) lines differ, e.g. \(lines.first ?? "")")
        #expect(goodFailures.load(ordering: .relaxed) == 0)
    }
}
