internal import CALSA
import EarshotSupport
import EarshotAudio

/// A PCM sample format capture accepts from a device, with its conversion to `Float`.
///
/// All are little-endian, signed, interleaved. Conversion divides by the format's full scale, 2^(bits - 1), so the
/// most negative code maps to exactly -1.0 and the most positive to just below 1.0 (the same convention as
/// libsndfile and the YAMNet reference's `waveform / 32768.0`).
public enum SampleFormat: String, CaseIterable, Sendable {
    /// 16-bit signed (`S16_LE`), 2 bytes; full scale 32768.
    case s16LE = "S16_LE"
    /// 24-bit signed packed in 3 bytes (`S24_3LE`); full scale 8388608.
    case s24_3LE = "S24_3LE"
    /// 24-bit signed in the low 3 bytes of a 32-bit word (`S24_LE`), sign-extended from bit 23; full scale 8388608.
    case s24LE = "S24_LE"
    /// 32-bit signed (`S32_LE`); full scale 2147483648.
    case s32LE = "S32_LE"
    /// 32-bit IEEE float (`FLOAT_LE`), already full scale [-1, 1] (passed through unchanged, except that NaN,
    /// ±inf and magnitudes beyond 1000 are mapped by ``SampleSanitizer``: NaN -> 0, the others -> ±1000).
    case floatLE = "FLOAT_LE"

    /// The order capture tries formats in: `S16_LE`, `S24_3LE`, `S24_LE`, `S32_LE`, `FLOAT_LE`.
    ///
    /// S16_LE first: nearly every capture device offers it natively, it halves the bandwidth of the 32-bit formats,
    /// and 16 bits (96 dB) exceed what the classifier uses (YAMNet's training audio was 16-bit). The 24- and 32-bit
    /// integer formats follow for devices that offer only those (many USB and pro-audio interfaces); float last,
    /// since only software PCMs (plugins) offer it.
    public static let preferenceOrder: [SampleFormat] = [.s16LE, .s24_3LE, .s24LE, .s32LE, .floatLE]

    /// Bytes one sample of one channel occupies.
    public var bytesPerSample: Int {
        switch self {
        case .s16LE: 2
        case .s24_3LE: 3
        case .s24LE, .s32LE, .floatLE: 4
        }
    }

    /// The divisor that maps integer codes to [-1, 1): 2^(bits - 1); 1 for float.
    public var fullScale: Float {
        switch self {
        case .s16LE: 32_768
        case .s24_3LE, .s24LE: 8_388_608
        case .s32LE: 2_147_483_648
        case .floatLE: 1
        }
    }

    /// The ALSA format constant.
    var alsaFormat: snd_pcm_format_t {
        switch self {
        case .s16LE: SND_PCM_FORMAT_S16_LE
        case .s24_3LE: SND_PCM_FORMAT_S24_3LE
        case .s24LE: SND_PCM_FORMAT_S24_LE
        case .s32LE: SND_PCM_FORMAT_S32_LE
        case .floatLE: SND_PCM_FORMAT_FLOAT_LE
        }
    }

    /// Parses an ALSA format name as written in configuration (`S16_LE`, case-insensitive); nil when unknown.
    public init?(name: String) {
        guard let format = SampleFormat(rawValue: name.uppercased()) else { return nil }
        self = format
    }
}

/// Converts interleaved device frames to mono `Float` samples.
public enum SampleConversion {
    /// Converts `frameCount` interleaved frames of `channels` channels in `format` at `source` to mono samples at
    /// `destination`: each sample is divided by the format's full scale (see ``SampleFormat/fullScale``), then the
    /// channels are averaged (`(c0 + c1 + ...) / channels` in Float). Float samples are sanitized first
    /// (``SampleSanitizer``: NaN -> 0, beyond ±1000 -> ±1000), so the output is always finite.
    ///
    /// - Parameters:
    ///   - source: `frameCount * channels * format.bytesPerSample` bytes, any alignment.
    ///   - destination: room for `frameCount` samples.
    /// - Important: Does not allocate; safe on the capture thread.
    public static func convertToMono(
        _ source: UnsafeRawPointer, format: SampleFormat, channels: Int, frameCount: Int,
        into destination: UnsafeMutablePointer<Float>
    ) {
        guard frameCount > 0, channels > 0 else { return }
        let scale = 1 / format.fullScale  // an exact power of two, so multiplying equals dividing
        let width = format.bytesPerSample
        if channels == 1 {
            for frame in 0..<frameCount {
                destination[frame] = sample(source, byteOffset: frame * width, format: format) * scale
            }
            return
        }
        let divisor = Float(channels)
        let frameBytes = width * channels
        for frame in 0..<frameCount {
            var sum: Float = 0
            let base = frame * frameBytes
            for channel in 0..<channels {
                sum += sample(source, byteOffset: base + channel * width, format: format) * scale
            }
            destination[frame] = sum / divisor
        }
    }

    /// One sample as a Float in integer units (not yet scaled).
    @inline(__always)
    package static func sample(_ source: UnsafeRawPointer, byteOffset: Int, format: SampleFormat) -> Float {
        switch format {
        case .s16LE:
            return Float(Int16(littleEndian: source.loadUnaligned(fromByteOffset: byteOffset, as: Int16.self)))
        case .s24_3LE:
            let b0 = UInt32(source.load(fromByteOffset: byteOffset, as: UInt8.self))
            let b1 = UInt32(source.load(fromByteOffset: byteOffset + 1, as: UInt8.self))
            let b2 = UInt32(source.load(fromByteOffset: byteOffset + 2, as: UInt8.self))
            // Put the 24 bits at the top of an Int32, then shift back arithmetically to sign-extend.
            return Float(Int32(bitPattern: (b0 << 8) | (b1 << 16) | (b2 << 24)) >> 8)
        case .s24LE:
            let word = UInt32(littleEndian: source.loadUnaligned(fromByteOffset: byteOffset, as: UInt32.self))
            return Float(Int32(bitPattern: word << 8) >> 8)  // the top byte is padding: ignore it, sign-extend bit 23
        case .s32LE:
            return Float(Int32(littleEndian: source.loadUnaligned(fromByteOffset: byteOffset, as: Int32.self)))
        case .floatLE:
            let bits = UInt32(littleEndian: source.loadUnaligned(fromByteOffset: byteOffset, as: UInt32.self))
            // Only float can be NaN or infinite; one such sample would spoil every window it is in.
            return SampleSanitizer.sanitized(Float(bitPattern: bits))
        }
    }
}
