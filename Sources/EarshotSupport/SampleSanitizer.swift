/// Makes float samples safe for the analysis: NaN becomes 0 and magnitudes beyond ``limit`` (including ±infinity)
/// are clamped to ±``limit``.
///
/// Integer PCM cannot hold such values, but float sources can: a float WAV or FLOAT_LE device may carry NaN, ±inf
/// or 1e30. One NaN would turn every window it touches (spectrogram, level, scores) into NaN, and 1e30 squared
/// overflows to infinity; either hides detections and prints `nan`. Values above full scale but below the limit are
/// legal in float audio (over-full-scale peaks) and pass unchanged.
///
/// The limit, 1000 (+60 dBFS), is far above any real over-full-scale peak and keeps every later sum of squares
/// finite in `Float` (a 10 s window at 768 kHz of ±1000 sums to 7.7e12, far below `Float.greatestFiniteMagnitude`).
public enum SampleSanitizer {
    /// The largest magnitude a sample keeps: 1000 (+60 dBFS).
    public static let limit: Float = 1_000

    /// `value` made finite: NaN -> 0, below -``limit`` -> -``limit``, above ``limit`` -> ``limit``; others unchanged.
    @inline(__always)
    public static func sanitized(_ value: Float) -> Float {
        if value.isNaN { return 0 }
        return value > limit ? limit : (value < -limit ? -limit : value)
    }

    /// Sanitizes `count` samples at `samples` in place (see ``sanitized(_:)``).
    ///
    /// - Important: Does not allocate; safe on the capture thread.
    @inline(__always)
    public static func sanitize(_ samples: UnsafeMutablePointer<Float>, count: Int) {
        for index in 0..<max(0, count) { samples[index] = sanitized(samples[index]) }
    }
}
