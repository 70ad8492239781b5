import FoundationEssentials
import Glibc
import EarshotSupport
import EarshotAudio
import EarshotDetection

/// `earshot eval --onsets`: what the `glass_break` shatter gate (``ShatterOnsets``) measured in a recording, one
/// line per candidate onset, for tuning its parameters on labelled files.
package enum ShatterProbe {
    /// The files of a MANIFEST.tsv (first column, relative to it) whose path or label (fourth column) contains
    /// `only` (every file when nil), as (path as listed, URL).
    /// - Throws: as ``Manifest/read(_:)`` (`.noInput` cannot be read, `.data` not a manifest).
    package static func files(manifest: URL, only: String?) throws(EarshotError) -> [(String, URL)] {
        let rows = try Manifest.read(manifest).rows
        let root = manifest.deletingLastPathComponent()
        return rows.compactMap { columns in
            guard columns.count >= 4 else { return nil }
            if let only, !columns[0].contains(only) && !columns[3].contains(only) { return nil }
            return (columns[0], root.appendingPathComponent(columns[0]))
        }
    }

    /// One line per candidate onset in `samples` (mono, 16 kHz), in time order: its time (s), rise above the
    /// background (dB), onset flatness and share of energy above 2 kHz, tail flatness, sustain (fraction),
    /// first-half drop, decay and late drop (dB), and `shatter` when it passed every test (else the first test it failed).
    package static func lines(samples: [Float], parameters: ShatterOnsets.Parameters = .init()) -> [String] {
        let finder = ShatterOnsets(parameters: parameters)
        finder.keepCandidates = true
        samples.withUnsafeBufferPointer { all in
            var position = 0
            while position < all.count {
                let count = min(1_600, all.count - position)
                finder.feed(UnsafeBufferPointer(rebasing: all[position..<(position + count)]), firstIndex: Int64(position))
                position += count
            }
            // 1.5 s of silence lets the last candidate's tail and late level be measured.
            let silence = [Float](repeating: 0, count: 24_000)
            silence.withUnsafeBufferPointer { finder.feed($0, firstIndex: Int64(all.count)) }
        }
        return finder.measured.map { onset in
            String(cFormat: "%8.2f s  rise %5.1f dB  flatness %.3f  high %.2f  tail flatness %.3f  sustain %.2f  first-half drop %5.1f dB  decay %5.1f dB  late drop %5.1f dB  ",
                   onset.time, onset.riseDB, onset.flatness, onset.highShare, onset.tailFlatness, onset.sustain,
                   onset.firstHalfDropDB, onset.decayDB, onset.lateDropDB) + verdict(onset, parameters)
        }
    }

    /// `shatter`, or the first of the gate's tests the onset failed (`onset flatness`, ...).
    package static func verdict(_ onset: ShatterOnsets.Onset, _ parameters: ShatterOnsets.Parameters) -> String {
        if onset.isShatter { return "shatter" }
        if onset.flatness < parameters.onsetFlatness { return "no: onset flatness" }
        if onset.highShare < parameters.highShare { return "no: high share" }
        if onset.tailFlatness < parameters.tailFlatness { return "no: tail flatness" }
        if onset.sustain < parameters.sustain { return "no: sustain" }
        if onset.decayDB < parameters.decayDB { return "no: decay" }
        if onset.firstHalfDropDB > parameters.firstHalfDropDB { return "no: first-half drop" }
        return "no: late drop"
    }
}
