import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis

/// Synthetic alarm and confuser signals for tests and `earshot eval`: exact on/off timings, a sine (piezo) or a
/// square wave (low-frequency sounder), plus room reverberation, a phone line's band limit and companding, and
/// mixing with recorded noise at a given SNR.
///
/// Timings follow the standards the detector targets: T3 (ISO 8201 / NFPA 72) 0.5 s on, 0.5 s off, three times,
/// then 1.5 s off (4 s cycle); T4 (UL 2034 CO alarms) 0.1 s on, 0.1 s off, four times, then 5 s off (5.7 s cycle).
package enum AlarmSignals {
    /// Waveform of a tone.
    package enum Waveform: Sendable {
        /// A sine: a piezo sounder.
        case sine
        /// A square wave (odd harmonics, 1/n): the 520 Hz low-frequency sounders for sleepers.
        case square
    }

    /// One "on" interval of a tone: start and duration in seconds, frequency in Hz.
    package struct Tone: Sendable, Equatable {
        package var start: Double
        package var duration: Double
        package var frequencyHz: Double
        package var secondFrequencyHz: Double?

        package init(start: Double, duration: Double, frequencyHz: Double, secondFrequencyHz: Double? = nil) {
            self.start = start
            self.duration = duration
            self.frequencyHz = frequencyHz
            self.secondFrequencyHz = secondFrequencyHz
        }
    }

    /// T3 tones: `cycles` cycles from `start` (s) at `frequencyHz`.
    package static func t3(frequencyHz: Double, cycles: Int, start: Double = 0) -> [Tone] {
        (0..<max(0, cycles)).flatMap { cycle in
            (0..<3).map { Tone(start: start + Double(cycle) * 4 + Double($0), duration: 0.5, frequencyHz: frequencyHz) }
        }
    }

    /// T4 tones: `cycles` cycles of four 0.1 s tones 0.1 s apart, then 5 s off (5.7 s cycle).
    package static func t4(frequencyHz: Double, cycles: Int, start: Double = 0) -> [Tone] {
        (0..<max(0, cycles)).flatMap { cycle in
            (0..<4).map { Tone(start: start + Double(cycle) * 5.7 + 0.2 * Double($0), duration: 0.1, frequencyHz: frequencyHz) }
        }
    }

    /// A reversing-truck beeper: steady 0.5 s on / 0.5 s off at 1.1 kHz for `seconds`.
    package static func truckBeeper(seconds: Double, frequencyHz: Double = 1100, start: Double = 0) -> [Tone] {
        stride(from: start, to: start + seconds, by: 1.0).map { Tone(start: $0, duration: 0.5, frequencyHz: frequencyHz) }
    }

    /// Low-battery chirps: one `duration` s tone every `interval` s.
    package static func chirps(count: Int, interval: Double = 40, frequencyHz: Double = 3200, duration: Double = 0.06,
                              start: Double = 0) -> [Tone] {
        (0..<max(0, count)).map { Tone(start: start + Double($0) * interval, duration: duration, frequencyHz: frequencyHz) }
    }

    /// A microwave's end-of-cooking signal: three 0.4 s beeps 0.4 s apart at 2.0 kHz, repeated after 60 s.
    package static func microwave(start: Double = 0) -> [Tone] {
        [0.0, 60.0].flatMap { offset in
            (0..<3).map { Tone(start: start + offset + 0.8 * Double($0), duration: 0.4, frequencyHz: 2000) }
        }
    }

    /// An oven timer: 1 s beeps every 2 s at 2.7 kHz for `seconds`.
    package static func ovenTimer(seconds: Double, start: Double = 0) -> [Tone] {
        stride(from: start, to: start + seconds, by: 2.0).map { Tone(start: $0, duration: 1.0, frequencyHz: 2700) }
    }

    /// A digital alarm clock: four 0.08 s beeps 0.07 s apart, then 0.5 s off, at 4.0 kHz, for `seconds`.
    package static func alarmClock(seconds: Double, frequencyHz: Double = 3950, start: Double = 0) -> [Tone] {
        stride(from: start, to: start + seconds, by: 1.1).flatMap { burst in
            (0..<4).map { Tone(start: burst + 0.15 * Double($0), duration: 0.08, frequencyHz: frequencyHz) }
        }
    }

    /// A UK telephone ring: 400 + 450 Hz, 0.4 s on, 0.2 s off, 0.4 s on, 2 s off, for `seconds`.
    package static func phoneRing(seconds: Double, start: Double = 0) -> [Tone] {
        stride(from: start, to: start + seconds, by: 3.0).flatMap { ring in
            [Tone(start: ring, duration: 0.4, frequencyHz: 400, secondFrequencyHz: 450),
             Tone(start: ring + 0.6, duration: 0.4, frequencyHz: 400, secondFrequencyHz: 450)]
        }
    }

    /// A patient monitor's medium-priority alarm (IEC 60601-1-8): three 0.2 s pulses 0.4 s apart at 1 kHz, every
    /// `interval` s, for `seconds`.
    package static func monitorMedium(seconds: Double, interval: Double = 5, start: Double = 0) -> [Tone] {
        stride(from: start, to: start + seconds, by: interval).flatMap { burst in
            (0..<3).map { Tone(start: burst + 0.4 * Double($0), duration: 0.2, frequencyHz: 1000) }
        }
    }

    /// A patient monitor's high-priority alarm (IEC 60601-1-8): pulses of 0.15 s every 0.25 s, three, then two after
    /// a 0.5 s pause, at 1 kHz, every `interval` s, for `seconds`.
    package static func monitorHigh(seconds: Double, interval: Double = 6, start: Double = 0) -> [Tone] {
        stride(from: start, to: start + seconds, by: interval).flatMap { burst in
            [0.0, 0.25, 0.5, 1.15, 1.4].map { Tone(start: burst + $0, duration: 0.15, frequencyHz: 1000) }
        }
    }

    /// Renders `tones` into `seconds` of audio at `sampleRate`, peak amplitude `amplitude`, with 5 ms raised-cosine
    /// ramps (a real sounder's attack and release).
    package static func render(_ tones: [Tone], seconds: Double, sampleRate: Int, waveform: Waveform = .sine,
                              amplitude: Float = 0.5) -> [Float] {
        let count = max(0, Int(seconds * Double(sampleRate)))
        var samples = [Float](repeating: 0, count: count)
        let rate = Double(sampleRate)
        let ramp = 0.005
        for tone in tones {
            let first = max(0, Int(tone.start * rate)), last = min(count, Int((tone.start + tone.duration) * rate))
            guard first < last else { continue }
            for n in first..<last {
                let t = Double(n) / rate
                let local = t - tone.start
                var gain = 1.0
                if local < ramp { gain = 0.5 - 0.5 * cos(Double.pi * local / ramp) }
                if tone.duration - local < ramp { gain = min(gain, 0.5 - 0.5 * cos(Double.pi * max(0, tone.duration - local) / ramp)) }
                var value: Double
                let phase = 2 * Double.pi * tone.frequencyHz * t
                switch waveform {
                case .sine: value = sin(phase)
                case .square: value = sin(phase) >= 0 ? 0.8 : -0.8
                }
                if let second = tone.secondFrequencyHz { value = 0.5 * (value + sin(2 * Double.pi * second * t)) }
                samples[n] += Float(gain * value) * amplitude
            }
        }
        return samples
    }

    /// Adds room reverberation in place: a Schroeder reverberator (four parallel feedback combs, two all-passes)
    /// with reverberation time `rt60` seconds, mixed at `wet` (0...1).
    package static func reverberate(_ samples: inout [Float], sampleRate: Int, rt60: Double = 0.5, wet: Float = 0.5) {
        let rate = Double(sampleRate)
        let combDelays = [0.0297, 0.0371, 0.0411, 0.0437].map { Int($0 * rate) }
        var out = [Float](repeating: 0, count: samples.count)
        for delay in combDelays {
            let gain = Float(pow(10, -3 * Double(delay) / rate / rt60))
            var line = [Float](repeating: 0, count: delay)
            var index = 0
            for n in 0..<samples.count {
                let delayed = line[index]
                line[index] = samples[n] + gain * delayed
                index = (index + 1) % delay
                out[n] += delayed * 0.25
            }
        }
        for (seconds, gain) in [(0.005, Float(0.7)), (0.0017, Float(0.7))] {
            let delay = max(1, Int(seconds * rate))
            var line = [Float](repeating: 0, count: delay)
            var index = 0
            for n in 0..<out.count {
                let delayed = line[index]
                let input = out[n] + gain * delayed
                line[index] = input
                out[n] = delayed - gain * input
                index = (index + 1) % delay
            }
        }
        for n in 0..<samples.count { samples[n] = (1 - wet) * samples[n] + wet * out[n] }
    }

    /// Adds a diffuse room tail in place: velvet noise (one tap of random sign per 1/`density` s, at a random
    /// position within its slot) decaying by 60 dB over `rt60` seconds, added to the direct sound scaled by
    /// `direct`, then scaled back to the input's peak. Unlike the comb reverberator above it has no flutter, so a
    /// beep's tail decays smoothly past its end, as in a tiled kitchen. `seed` makes it reproducible.
    package static func reverberateDiffuse(_ samples: inout [Float], sampleRate: Int, rt60: Double,
                                           density: Double = 1000, direct: Float, seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let length = Int(rt60 * Double(sampleRate))
        let slot = Double(sampleRate) / density
        var taps: [(delay: Int, gain: Float)] = []
        var slotStart = 0.0
        while Int(slotStart) < length {
            let delay = Int(slotStart + random.nextUnit() * slot)
            let sign = random.nextUnit() < 0.5 ? -1.0 : 1.0
            if delay > 0 && delay < length {
                // 6.9 = ln(1000): 60 dB of amplitude decay at `length`; sqrt(slot) keeps the tail's energy
                // independent of the density.
                taps.append((delay, Float(sign * exp(-6.9 * Double(delay) / Double(length)) * slot.squareRoot())))
            }
            slotStart += slot
        }
        let dry = samples
        let inputPeak = dry.reduce(Float(0)) { max($0, abs($1)) }
        for n in samples.indices { samples[n] = dry[n] * direct }
        for tap in taps where tap.delay < dry.count {
            for n in tap.delay..<dry.count { samples[n] += tap.gain * dry[n - tap.delay] }
        }
        let outputPeak = samples.reduce(Float(0)) { max($0, abs($1)) }
        if outputPeak > 0 { for n in samples.indices { samples[n] *= inputPeak / outputPeak } }
    }

    /// A phone call's channel in place: band limit 300-3400 Hz (second-order high- and low-pass) and 8-bit mu-law
    /// companding (G.711), the distortion a recording sent from a phone carries.
    package static func phoneChannel(_ samples: inout [Float], sampleRate: Int) {
        func biquad(_ x: inout [Float], b: [Double], a: [Double]) {
            var x1 = 0.0, x2 = 0.0, y1 = 0.0, y2 = 0.0
            for n in 0..<x.count {
                let input = Double(x[n])
                let y = b[0] * input + b[1] * x1 + b[2] * x2 - a[1] * y1 - a[2] * y2
                x2 = x1; x1 = input; y2 = y1; y1 = y
                x[n] = Float(y)
            }
        }
        func coefficients(cutoff: Double, highPass: Bool) -> ([Double], [Double]) {
            let w0 = 2 * Double.pi * cutoff / Double(sampleRate), alpha = sin(w0) / (2 * 0.7071)
            let cosw = cos(w0), a0 = 1 + alpha
            let b = highPass ? [(1 + cosw) / 2, -(1 + cosw), (1 + cosw) / 2] : [(1 - cosw) / 2, 1 - cosw, (1 - cosw) / 2]
            return (b.map { $0 / a0 }, [1, -2 * cosw / a0, (1 - alpha) / a0])
        }
        let (hb, ha) = coefficients(cutoff: 300, highPass: true)
        let (lb, la) = coefficients(cutoff: min(3400, Double(sampleRate) * 0.45), highPass: false)
        biquad(&samples, b: hb, a: ha)
        biquad(&samples, b: lb, a: la)
        let mu = 255.0
        for n in 0..<samples.count {
            let x = Double(max(-1, min(1, samples[n])))
            let encoded = (x < 0 ? -1.0 : 1.0) * log(1 + mu * abs(x)) / log(1 + mu)
            let quantised = (encoded * 127).rounded() / 127
            samples[n] = Float((quantised < 0 ? -1.0 : 1.0) * (pow(1 + mu, abs(quantised)) - 1) / mu)
        }
    }

    /// Mean square of `samples` over the "on" intervals of `tones` (the tone's level while it sounds), or of all
    /// samples when `tones` is empty.
    package static func onPower(_ samples: [Float], tones: [Tone], sampleRate: Int) -> Double {
        var sum = 0.0, count = 0
        if tones.isEmpty {
            for value in samples { sum += Double(value) * Double(value) }
            return samples.isEmpty ? 0 : sum / Double(samples.count)
        }
        for tone in tones {
            let first = max(0, Int(tone.start * Double(sampleRate)))
            let last = min(samples.count, Int((tone.start + tone.duration) * Double(sampleRate)))
            guard first < last else { continue }
            for n in first..<last { sum += Double(samples[n]) * Double(samples[n]) }
            count += last - first
        }
        return count > 0 ? sum / Double(count) : 0
    }

    /// Adds `noise` (looped to the signal's length) to `signal` in place, scaled so that the signal's power over
    /// `tones` is `snrDB` above the noise's mean power. Returns the noise gain used.
    @discardableResult
    package static func mix(_ signal: inout [Float], tones: [Tone], noise: [Float], snrDB: Double, sampleRate: Int) -> Float {
        guard !noise.isEmpty else { return 0 }
        let signalPower = onPower(signal, tones: tones, sampleRate: sampleRate)
        let noisePower = onPower(noise, tones: [], sampleRate: sampleRate)
        guard noisePower > 0, signalPower > 0 else { return 0 }
        let gain = Float((signalPower / noisePower / pow(10, snrDB / 10)).squareRoot())
        for n in 0..<signal.count { signal[n] += gain * noise[n % noise.count] }
        return gain
    }
}
