internal import CMpg123
import Glibc
import EarshotSupport

/// One MP3 (MPEG-1/2/2.5 audio, layers I-III) decoded by libmpg123 from a file descriptor, as 32-bit float frames
/// at the stream's own rate and channel count (1 or 2). Used by ``AudioFileDecoder`` for MP3 files.
///
/// libmpg123 is set up as libsndfile 1.2 sets it up (no automatic resampling, float output, gapless decoding,
/// the format of the first frame locked), so the samples are the ones libsndfile gave, bit for bit, plus
/// `MPG123_QUIET`: libmpg123 prints nothing on stderr (it would otherwise print a line per damaged frame, and
/// "Xing stream size off by more than 1%" for a cut file, into the terminal or the journal).
///
/// - Important: Not thread-safe. The class owns the `mpg123_handle` (deleted in `deinit`), not the descriptor.
final class MP3Stream {
    /// Frames per second, in Hz (libmpg123's rates: 8000 to 48000).
    let sampleRate: Int
    /// Channels per frame: 1 or 2.
    let channelCount: Int
    /// The MPEG audio layer of the first frame: 1, 2 or 3.
    let layer: Int
    /// libmpg123's length in frames: exact with a Xing/Info or VBRI header, else estimated from the file size;
    /// nil when it cannot say.
    let declaredFrameCount: Int64?
    /// Set when a read stopped on a decoding error: libmpg123's text (the stream has ended).
    private(set) var failure: String?

    private let handle: OpaquePointer
    private let descriptor: Int32
    private let fileSize: Int64
    private var ended = false

    /// libmpg123's one-time setup (a no-op since 1.27, still required by older versions).
    private static let libraryReady: Bool = mpg123_init() == MPG123_OK.rawValue

    /// Opens the MP3 on `descriptor` (positioned at 0) and reads up to its first frame.
    ///
    /// - Parameters:
    ///   - name: the file as the user named it, for error lines.
    ///   - fileSize: the file's size in bytes (for the truncation checks).
    /// - Throws: ``EarshotError`` `.data`: `NAME: truncated: ...` when the file ends inside its ID3v2 tag or
    ///   before its first complete audio frame; `NAME: no audio frames ...` when an ID3 tag holds all there is;
    ///   `NAME: not MP3 audio libmpg123 can decode (...)` otherwise. `.system` when libmpg123 cannot make a
    ///   decoder. The corresponding C functions are `mpg123_new`, `mpg123_param`, `mpg123_open_fd`,
    ///   `mpg123_getformat`, `mpg123_format` and `mpg123_info`.
    init(descriptor: Int32, fileSize: Int64, name: String) throws(EarshotError) {
        _ = Self.libraryReady
        var code: Int32 = 0
        guard let created = mpg123_new(nil, &code) else {
            let text = String(cString: mpg123_plain_strerror(code))
            throw EarshotError(.system, "\(name): cannot start the MP3 decoder (libmpg123: \(text))", cause: text)
        }
        handle = created
        self.descriptor = descriptor
        self.fileSize = fileSize
        // Quiet before anything is read: libmpg123 reports what it finds while opening, too.
        let flags = Int(MPG123_QUIET.rawValue | MPG123_FORCE_FLOAT.rawValue)
        guard mpg123_param2(handle, Int32(MPG123_ADD_FLAGS.rawValue), flags, 0) == MPG123_OK.rawValue,
              mpg123_param2(handle, Int32(MPG123_REMOVE_FLAGS.rawValue), Int(MPG123_AUTO_RESAMPLE.rawValue), 0) == MPG123_OK.rawValue
        else {
            let text = String(cString: mpg123_strerror(created))
            mpg123_delete(created)
            throw EarshotError(.system, "\(name): cannot set up the MP3 decoder (libmpg123: \(text))", cause: text)
        }
        guard mpg123_open_fd(handle, descriptor) == MPG123_OK.rawValue else {
            let text = String(cString: mpg123_strerror(handle))
            mpg123_delete(created)
            throw EarshotError(.data, "\(name): not MP3 audio libmpg123 can decode (\(text); the file is damaged or not MP3)", cause: text)
        }
        var rate = 0
        var channels: Int32 = 0
        var encoding: Int32 = 0
        let status = mpg123_getformat(handle, &rate, &channels, &encoding)
        guard status == MPG123_OK.rawValue, rate > 0, channels == 1 || channels == 2 else {
            let text = String(cString: mpg123_strerror(handle))
            mpg123_close(handle)
            mpg123_delete(created)
            throw Self.openingError(name: name, descriptor: descriptor, fileSize: fileSize, libraryText: text)
        }
        // Float output at every rate and channel count: libsndfile locks the first frame's format, and then a
        // damaged frame header with another rate makes libmpg123 print "Unable to set up output format!" even when
        // quiet (an unconditional message in 1.31); accepted, it is a new format, refused in ``read(into:frames:)``.
        var rates: UnsafePointer<Int>? = nil
        var rateCount = 0
        mpg123_rates(&rates, &rateCount)
        let channelMask = Int32(MPG123_MONO.rawValue | MPG123_STEREO.rawValue)
        let float32 = Int32(MPG123_ENC_FLOAT_32.rawValue)
        guard mpg123_format_none(handle) == MPG123_OK.rawValue,
              mpg123_format(handle, rate, channels, float32) == MPG123_OK.rawValue,
              (0..<rateCount).allSatisfy({ mpg123_format(created, rates![$0], channelMask, float32) == MPG123_OK.rawValue })
        else {
            let text = String(cString: mpg123_strerror(handle))
            mpg123_close(handle)
            mpg123_delete(created)
            throw EarshotError(.data, "\(name): MP3 format \(rate) Hz, \(channels) channels cannot be decoded as float (libmpg123: \(text))", cause: text)
        }
        var frame = mpg123_frameinfo2()
        layer = mpg123_info2(handle, &frame) == MPG123_OK.rawValue ? Int(frame.layer) : 3
        sampleRate = rate
        channelCount = Int(channels)
        let length = mpg123_length(handle)
        declaredFrameCount = length > 0 ? Int64(length) : nil
    }

    deinit {
        mpg123_close(handle)
        mpg123_delete(handle)
    }

    /// Decodes up to `frames` interleaved frames into `output` (`[frames, channelCount]`). Returns the frames
    /// written; fewer than asked for means the end of the stream or a decoding error (``failure``). The
    /// corresponding C function is `mpg123_read`.
    func read(into output: UnsafeMutablePointer<Float>, frames: Int) -> Int {
        guard !ended, frames > 0 else { return 0 }
        let frameBytes = MemoryLayout<Float>.size * channelCount
        let wanted = frames * frameBytes
        var filled = 0
        var idleReads = 0
        while filled < wanted {
            var done = 0
            let status = mpg123_read(handle, UnsafeMutableRawPointer(output) + filled, wanted - filled, &done)
            filled += done
            if status == MPG123_NEW_FORMAT.rawValue {
                var rate = 0
                var channels: Int32 = 0
                var encoding: Int32 = 0
                if mpg123_getformat(handle, &rate, &channels, &encoding) != MPG123_OK.rawValue
                    || rate != sampleRate || Int(channels) != channelCount
                {
                    ended = true
                    failure = "the stream changes from \(sampleRate) Hz, \(channelCount) channels to \(rate) Hz, \(channels) channels mid-file"
                    break
                }
            }
            if status == MPG123_OK.rawValue || status == MPG123_NEW_FORMAT.rawValue {
                // A read that gives nothing many times in a row would otherwise spin.
                idleReads = done == 0 ? idleReads + 1 : 0
                if idleReads > 16 {
                    ended = true
                    break
                }
                continue
            }
            ended = true
            if status != MPG123_DONE.rawValue {
                failure = String(cString: mpg123_strerror(handle))
            }
            break
        }
        return filled / frameBytes
    }

    /// After the end: whether the file ends inside an audio frame, i.e. the bytes after the last decoded frame
    /// start an MPEG audio frame header whose frame would reach past the end of the file (a copy or download cut
    /// short). Trailing tags (ID3v1 `TAG`, APEv2, Lyrics3) do not start with a frame sync and so do not count.
    /// The corresponding C functions are `mpg123_framepos`, `mpg123_info` and `pread`.
    func endsInsideFrame() -> Bool {
        var frame = mpg123_frameinfo2()
        let position = Int64(mpg123_framepos(handle))
        guard position >= 0, mpg123_info2(handle, &frame) == MPG123_OK.rawValue, frame.framesize > 0 else {
            return false
        }
        let end = position + Int64(frame.framesize)
        let remaining = fileSize - end
        guard remaining > 0 else { return false }
        let bytes = Self.bytes(of: descriptor, at: end, count: 4)
        if let header = MPEGAudioHeader(bytes) {
            return header.frameLength.map { Int64($0) > remaining } ?? false
        }
        // Fewer than 4 bytes left: a cut inside the next frame's header.
        return bytes.count < 4 && bytes.first == 0xFF && (bytes.count < 2 || bytes[1] & 0xE0 == 0xE0)
    }

    /// Why an MP3 has no first frame: an ID3v2 tag that claims more bytes than the file holds, or a first frame
    /// header whose frame reaches past the end of the file, is a truncated file; a tag and nothing else holds no
    /// audio; anything else is damage or not MP3 at all.
    private static func openingError(name: String, descriptor: Int32, fileSize: Int64, libraryText: String) -> EarshotError {
        let leading = bytes(of: descriptor, at: 0, count: 16_384)
        var audioStart: Int64 = 0
        if leading.starts(with: [0x49, 0x44, 0x33]), leading.count < 10 {  // "ID3", cut inside the tag's header
            return EarshotError(.data, "\(name): truncated: the file ends inside its ID3 tag (\(fileSize) bytes; the copy or recording was cut short; copy it again)")
        }
        if let tagLength = MPEGAudioHeader.id3v2Length(leading) {
            audioStart = Int64(tagLength)
            if audioStart > fileSize {
                return EarshotError(.data, "\(name): truncated: the file ends inside its ID3 tag (\(fileSize) of the \(audioStart) bytes it declares; the copy or recording was cut short; copy it again)")
            }
            if audioStart == fileSize {
                return EarshotError(.data, "\(name): no audio frames (the file holds an ID3 tag but no MPEG audio)")
            }
        }
        // Walk the first frames (a Xing/Info frame holds no audio): one that reaches past the end is a cut file;
        // complete frames up to the end, none decodable, hold no audio.
        var position = audioStart
        for _ in 0..<8 {
            let next = bytes(of: descriptor, at: position, count: 4)
            let header = MPEGAudioHeader(next)
            let cutInHeader = next.count < 4 && next.first == 0xFF
            if cutInHeader || header.flatMap(\.frameLength).map({ position + Int64($0) > fileSize }) == true {
                return EarshotError(.data, "\(name): truncated: the MP3 ends inside its first audio frame (\(fileSize) bytes; the copy or recording was cut short; copy it again)")
            }
            guard let length = header?.frameLength else { break }
            position += Int64(length)
            if position == fileSize {
                return EarshotError(.data, "\(name): no audio frames (the file holds MP3 headers but no audio)")
            }
        }
        return EarshotError(.data, "\(name): not MP3 audio libmpg123 can decode (no MPEG audio frame found: \(libraryText); the file is damaged or not MP3)", cause: libraryText)
    }

    /// Up to `count` bytes at `offset` (fewer at the end of the file; empty on a read error). The corresponding C
    /// function is `pread`.
    static func bytes(of descriptor: Int32, at offset: Int64, count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var got = 0
        while got < count {
            let result = bytes.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress! + got, count - got, off_t(offset) + off_t(got))
            }
            if result < 0 && errno == EINTR { continue }
            guard result > 0 else { break }
            got += result
        }
        return Array(bytes.prefix(got))
    }
}

/// The 4-byte header of an MPEG audio frame (ISO 11172-3, 13818-3 and the MPEG 2.5 extension): version, layer,
/// sample rate and the frame's length in bytes.
package struct MPEGAudioHeader: Equatable {
    /// 1 (MPEG-1), 2 (MPEG-2) or 25 (MPEG 2.5).
    package let version: Int
    /// 1, 2 or 3.
    package let layer: Int
    /// Hz.
    package let sampleRate: Int
    /// kb/s; nil for free format (index 0), whose frame length the header does not give.
    package let bitrate: Int?
    /// Whether the frame carries one padding slot.
    package let padding: Bool

    /// Parses `bytes` (at least 4); nil when they are not a valid header (no 11-bit sync, or a reserved version,
    /// layer, bitrate or sample-rate index).
    package init?(_ bytes: [UInt8]) {
        guard bytes.count >= 4, bytes[0] == 0xFF, bytes[1] & 0xE0 == 0xE0 else { return nil }
        let versionBits = Int(bytes[1] >> 3) & 3
        let layerBits = Int(bytes[1] >> 1) & 3
        let bitrateIndex = Int(bytes[2] >> 4)
        let rateIndex = Int(bytes[2] >> 2) & 3
        guard versionBits != 1, layerBits != 0, bitrateIndex != 15, rateIndex != 3 else { return nil }
        version = [25, 0, 2, 1][versionBits]
        layer = 4 - layerBits
        let baseRate = [44_100, 48_000, 32_000][rateIndex]
        sampleRate = version == 1 ? baseRate : version == 2 ? baseRate / 2 : baseRate / 4
        padding = bytes[2] & 0x02 != 0
        if bitrateIndex == 0 {
            bitrate = nil
        } else if version == 1 {
            bitrate = [Self.mpeg1Layer1, Self.mpeg1Layer2, Self.mpeg1Layer3][layer - 1][bitrateIndex]
        } else {
            bitrate = (layer == 1 ? Self.mpeg2Layer1 : Self.mpeg2Layer23)[bitrateIndex]
        }
    }

    /// The frame's length in bytes, header included; nil for free format.
    package var frameLength: Int? {
        guard let bitrate else { return nil }
        let bitsPerSecond = bitrate * 1000
        switch layer {
        case 1: return (12 * bitsPerSecond / sampleRate + (padding ? 1 : 0)) * 4
        case 2: return 144 * bitsPerSecond / sampleRate + (padding ? 1 : 0)
        default: return (version == 1 ? 144 : 72) * bitsPerSecond / sampleRate + (padding ? 1 : 0)
        }
    }

    /// The length of an ID3v2 tag at the start of `bytes` (10-byte header, syncsafe size, optional 10-byte
    /// footer), or nil when there is none.
    package static func id3v2Length(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 10, bytes[0] == 0x49, bytes[1] == 0x44, bytes[2] == 0x33 else { return nil }  // "ID3"
        let size = bytes[6...9].reduce(0) { $0 << 7 | Int($1 & 0x7F) }
        return 10 + size + (bytes[5] & 0x10 != 0 ? 10 : 0)
    }

    // Bitrates in kb/s by index (ISO 11172-3 table; 13818-3 for the lower sampling frequencies).
    private static let mpeg1Layer1 = [0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448]
    private static let mpeg1Layer2 = [0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384]
    private static let mpeg1Layer3 = [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]
    private static let mpeg2Layer1 = [0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256]
    private static let mpeg2Layer23 = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160]
}
