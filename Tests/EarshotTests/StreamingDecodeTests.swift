import Foundation
import Testing
import Earshot
import EarshotAudio
import EarshotSupport

/// The streaming decode (blocks of frames, mixed to mono and resampled to 16 kHz block by block) against the
/// whole-file path (the file in memory, one resampler call), on real files of each container.
@Suite("streaming decode")
struct StreamingDecodeTests {
    /// 16 kHz WAV (no resampling), 44.1 kHz stereo FLAC, 44.1 kHz MP3 (libmpg123), 44.1 kHz Ogg Vorbis, 48 kHz
    /// stereo Ogg Vorbis.
    static let files = [
        "alarm-tinyml/data/alarm/alarm.6gnkb889.ingestion-7f474ccdc-xbf9j.s1.wav",
        "snoring-khan/1/1_0.flac",
        "babycry-esc10/testing-data/004-Baby_cry/1-60997-B.mp3",
        "debian-qabcs-data/qabcs/abcs/all/noises/dog.ogg",
        "debian-sound-theme-freedesktop/sounds/freedesktop/stereo/alarm-clock-elapsed.oga",
    ]

    @Test("the blocks joined are decodeMono16k's samples, bit for bit, whatever the block size", .needsShared,
          arguments: files)
    func blocksEqualWholeFile(path: String) throws {
        let url = TestPaths.sharedFile("audio/" + path)
        let whole = try decodeMono16k(url)
        for blockSamples in [mono16kBlockSamples, 777, 1] {
            let decoder = try AudioFileDecoder(url: url)
            var joined: [Float] = []
            var largest = 0
            let length = try decodeMono16kBlocks(decoder, maxBlockSamples: blockSamples) { block in
                joined += block
                largest = max(largest, block.count)
            }
            #expect(length == whole.count, "\(path), blocks of \(blockSamples)")
            #expect(abs(joined.count - length) <= 1, "\(path): soxr's blocks give at most one sample more or fewer")
            if joined.count > length { joined.removeLast(joined.count - length) }
            joined += repeatElement(0, count: length - joined.count)
            #expect(joined == whole, "\(path), blocks of \(blockSamples)")
            // A block holds at most 65536 frames of input, and at most maxBlockSamples (+ rounding) of output
            // unless the 256-frame minimum block is larger.
            let bound = max(max(1, blockSamples), 256 * 16_000 / decoder.sampleRate) + 64
            #expect(largest <= bound + 1_024, "\(path): largest block \(largest)")
        }
    }

    @Test("the file analyzer (streaming decode, rounds of windows) gives the scores of the whole-file waveform",
          .needsShared, arguments: files.dropFirst())
    func analyzerEqualsWholeWaveform(path: String) throws {
        let url = TestPaths.sharedFile("audio/" + path)
        let request = try ClassifySoundRequest()
        let file = try AnalysisTestSupport.fileResults(url, request: request, threads: 2, windowsPerRound: 3)
        // The whole-file path: every 16 kHz sample in memory, handed over in one buffer.
        let waveform = try decodeMono16k(url)
        let stream = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 16_000, channelCount: 1))
        let whole = CollectingObserver()
        try stream.add(request, withObserver: whole)
        stream.analyze(waveform, atAudioFramePosition: 0)
        stream.completeAnalysis()
        #expect(file.errors.isEmpty && file.completions == 1)
        #expect(file.results.count == whole.results.count)
        #expect(file.results.count == request.geometry.windowCount(sampleCount: waveform.count))
        var worst: Float = 0
        for (streamed, reference) in zip(file.results, whole.results) {
            #expect(streamed.timeRange == reference.timeRange)
            #expect(streamed.levelDBFS == reference.levelDBFS)
            worst = max(worst, AnalysisTestSupport.maxDifference(streamed.scores, reference.scores[...]))
        }
        print("streaming vs whole-file waveform, \(path): \(file.results.count) windows, max |score difference| = \(worst)")
        #expect(worst <= 1e-6)
    }
}
