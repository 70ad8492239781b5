/// Recognises an audio container (or an MP3 stream) from the first bytes of a stream that should hold raw samples,
/// so that `earshotd --input -` can refuse a WAV or FLAC piped to it instead of playing its header and encoded
/// bytes as noise.
///
/// The signatures are the files' magic numbers: `RIFF`/`RIFX`/`RF64` (WAV), `FORM` (AIFF), `fLaC` (FLAC), `OggS`
/// (Ogg Vorbis/Opus/FLAC), `ID3` (an MP3's tag). A bare MP3 frame header (sync `0xFFE`) is four bytes a raw
/// stream can hold by chance, so it counts only when a second frame header follows at the length the first one
/// gives (MPEG-1/2/2.5 Layer III, the MP3 of every encoder).
public enum ContainerSignature: Equatable, Sendable {
    /// Not enough bytes yet to tell.
    case undecided
    /// No container: raw samples.
    case raw
    /// A container, named for a user ("a WAV file", "an MP3 stream").
    case container(String)

    /// The longest prefix ``identify(_:)`` may ask for before it decides: an MP3 frame (at most 1441 bytes for
    /// Layer III) and the next frame's 4-byte header.
    public static let longestPrefix = 1_445

    /// Identifies the start of a stream.
    ///
    /// - Parameter prefix: the stream's first bytes, as many as have arrived.
    /// - Returns: ``undecided`` while `prefix` is too short to tell (fewer than 4 bytes, or a possible MP3 frame
    ///   whose successor has not arrived); the caller treats a stream that ends undecided as raw.
    public static func identify(_ prefix: some Collection<UInt8>) -> ContainerSignature {
        let bytes = Array(prefix.prefix(longestPrefix))
        guard bytes.count >= 4 else { return .undecided }
        let magic = String(decoding: bytes[0..<4], as: UTF8.self)
        switch magic {
        case "RIFF", "RIFX", "RF64": return .container("a WAV file")
        case "FORM": return .container("an AIFF file")
        case "fLaC": return .container("a FLAC file")
        case "OggS": return .container("an Ogg file")
        default: break
        }
        if bytes[0..<3].elementsEqual("ID3".utf8) { return .container("an MP3 file") }
        guard let length = mp3FrameLength(bytes, at: 0) else { return .raw }
        guard bytes.count >= length + 4 else { return .undecided }
        // The next header must be of the same version, layer and sample rate.
        guard mp3FrameLength(bytes, at: length) != nil, bytes[length + 1] == bytes[1],
              bytes[length + 2] & 0x0C == bytes[2] & 0x0C else { return .raw }
        return .container("an MP3 stream")
    }

    /// The length in bytes of the Layer III frame whose header starts at `offset`, or nil when no valid header is there.
    private static func mp3FrameLength(_ bytes: [UInt8], at offset: Int) -> Int? {
        guard offset + 4 <= bytes.count, bytes[offset] == 0xFF, bytes[offset + 1] & 0xE0 == 0xE0 else { return nil }
        let version = (bytes[offset + 1] >> 3) & 3  // 0: MPEG-2.5, 2: MPEG-2, 3: MPEG-1 (1 is reserved)
        let layer = (bytes[offset + 1] >> 1) & 3  // 1: Layer III
        let bitrateIndex = Int(bytes[offset + 2] >> 4)
        let rateIndex = Int((bytes[offset + 2] >> 2) & 3)
        let padding = Int((bytes[offset + 2] >> 1) & 1)
        guard version != 1, layer == 1, (1...14).contains(bitrateIndex), rateIndex != 3 else { return nil }
        let mpeg1 = version == 3
        let kilobits =
            mpeg1
            ? [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320][bitrateIndex]
            : [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160][bitrateIndex]
        let rate = [44_100, 48_000, 32_000][rateIndex] / (mpeg1 ? 1 : version == 2 ? 2 : 4)
        return (mpeg1 ? 144 : 72) * kilobits * 1_000 / rate + padding
    }
}
