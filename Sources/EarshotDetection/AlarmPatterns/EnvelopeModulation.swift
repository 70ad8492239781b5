/// How strongly a level envelope (one value per 10 ms hop: a tone's frame level in dB, or 1/0 for "a piece of the
/// tone sounds") rises and falls with a period of ``minimumLag``...``maximumLag`` hops (0.20-0.60 s): the beat of a
/// fast beeper (a kitchen timer's 0.25 s beeps, an alarm clock's 0.15 s beeps 0.1 s apart) that a room's echo or
/// the tracker's rejoining merged into one long tone. A smoke alarm's long beeps repeat every 1 s or more and a
/// continuous alarm tone keeps its level; noise that chops a tone does not keep time.
///
/// Measure: with r(L) the envelope's autocorrelation at lag L hops (mean removed, normalised by its variance),
/// ``periodicity(minimumVariance:)`` is the largest (r(L) - max(r(L / 2), r(L / 3))) / 2 over the lags: a beat of
/// period L is in phase one period on and out of phase half a period on; the third keeps a faster beat's multiples
/// out (a piezo's 7 Hz vibrato in a room is in phase again at 3 x 0.14 s and out at 1.5 x). 0.6-0.7 for a square-wave
/// envelope (50-60 % on), about 0 for noise, at most 0 for a drift (r falls with the lag). A lag counts once four
/// periods have been seen.
///
/// Cost: `maximumLag - minimumLag / 3 + 1` (55) multiply-adds per value; 0.9 KB.
package struct EnvelopeModulation: Sendable, Equatable {
    /// Shortest period (hops) looked for: 0.20 s (an alarm clock's beep and gap, 0.25 s, with room to spare; a
    /// piezo's vibrato, 0.14 s, is faster).
    package static let minimumLag = 20
    /// Longest period (hops): 0.60 s. The non-T3 smoke alarms' long beeps repeat every 1.05-2.5 s (tuning sets).
    package static let maximumLag = 60

    private static let lowestLag = minimumLag / 3
    private var history = [Double](repeating: 0, count: maximumLag + 1)
    private var lagSums = [Double](repeating: 0, count: maximumLag - minimumLag / 3 + 1)
    private var count = 0
    private var sum = 0.0
    private var squares = 0.0

    package init() {}

    /// Adds the next value of the envelope.
    package mutating func add(_ value: Double) {
        let capacity = history.count
        let slot = count % capacity
        history.withUnsafeBufferPointer { h in
            lagSums.withUnsafeMutableBufferPointer { sums in
                for index in sums.indices {
                    let lag = index + Self.lowestLag
                    guard lag <= count else { break }
                    sums[index] += value * h[(slot - lag + capacity) % capacity]
                }
            }
        }
        history[slot] = value
        count += 1
        sum += value
        squares += value * value
    }

    /// The strongest periodicity (0...1; 0 when too little was seen or the envelope is flat) and its period in hops.
    /// - Parameter minimumVariance: the envelope's smallest variance (dB squared for levels; for a 0/1 train,
    ///   p (1 - p) with p its "on" fraction) for a periodicity: a steady tone's level hardly moves.
    package func periodicity(minimumVariance: Double) -> (score: Double, periodHops: Int) {
        guard count >= 4 * Self.minimumLag else { return (0, 0) }
        let n = Double(count)
        let mean = sum / n
        let variance = squares / n - mean * mean
        guard variance >= minimumVariance else { return (0, 0) }
        func r(_ lag: Int) -> Double {
            (lagSums[lag - Self.lowestLag] / Double(count - lag) - mean * mean) / variance
        }
        var best = (score: 0.0, periodHops: 0)
        for lag in Self.minimumLag...Self.maximumLag where 4 * lag <= count {
            let score = (r(lag) - max(r(lag / 2), r(lag / 3))) / 2
            if score > best.score { best = (score, lag) }
        }
        return (min(best.score, 1), best.periodHops)
    }
}
