internal import CSndFile
import Glibc

/// The chunks of a RIFF WAV header that Earshot reads itself, before libsndfile: the `fmt ` chunk's sample rate
/// and channel count, and where the `data` chunk is and what size it declares.
///
/// A recorder writing a WAV to a pipe cannot seek back to fill in the sizes, so it leaves them as it wrote them
/// first: some write 0 (others 0xFFFFFFFF, which libsndfile takes as "to the end of the file"). libsndfile 1.2
/// reads a data chunk declaring 0 bytes as empty (only RIFF size 8 with data size 0 is repaired), so
/// ``AudioFileDecoder`` presents such a file to it with the data size the file holds (``PatchedFileIO``).
struct RIFFHeader {
    /// Byte offset of the `data` chunk's size field (4 bytes, little-endian).
    let dataSizeOffset: Int
    /// The size the `data` chunk declares, in bytes.
    let declaredDataBytes: UInt32
    /// Byte offset of the first sample.
    var dataStart: Int { dataSizeOffset + 4 }
    /// The `fmt ` chunk's channel count and sample rate (Hz), when it comes before the data chunk.
    let channels: Int?
    let sampleRate: Int?

    /// Reads the chunks of `leading` (the start of the file): nil unless it starts with `RIFF....WAVE` and a
    /// `data` chunk header lies within it.
    init?(leading: [UInt8]) {
        func word(_ offset: Int) -> UInt32 { Self.word(leading, at: offset) }
        guard leading.count >= 12, leading[0..<4].elementsEqual("RIFF".utf8),
              leading[8..<12].elementsEqual("WAVE".utf8) else { return nil }
        var channels: Int?
        var sampleRate: Int?
        var offset = 12
        while offset + 8 <= leading.count {
            let size = word(offset + 4)
            if leading[offset..<(offset + 4)].elementsEqual("data".utf8) {
                dataSizeOffset = offset + 4
                declaredDataBytes = size
                self.channels = channels
                self.sampleRate = sampleRate
                return
            }
            if leading[offset..<(offset + 4)].elementsEqual("fmt ".utf8), size >= 16, offset + 16 <= leading.count {
                channels = Int(leading[offset + 10]) | Int(leading[offset + 11]) << 8
                sampleRate = Int(word(offset + 12))
            }
            offset += 8 + Int(size) + Int(size & 1)
        }
        return nil
    }

    /// The little-endian 32-bit word at `offset` of `bytes` (RIFF's byte order).
    private static func word(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16
            | UInt32(bytes[offset + 3]) << 24
    }

    /// Whether the data chunk declares 0 bytes while samples follow it in a file of `fileSize` bytes: a WAV
    /// written to a pipe. Not when what follows is one more chunk that ends the file exactly (an empty data chunk
    /// before a `LIST` chunk, say).
    func declaresNoDataBeforeSamples(leading: [UInt8], fileSize: Int64) -> Bool {
        guard declaredDataBytes == 0, Int64(dataStart) < fileSize else { return false }
        if dataStart + 8 <= leading.count {
            let id = leading[dataStart..<(dataStart + 4)]
            let size = Int64(Self.word(leading, at: dataStart + 4))
            let isChunkName = id.allSatisfy { (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) || $0 == 0x20 }
            if isChunkName && Int64(dataStart) + 8 + size + (size & 1) == fileSize { return false }
        }
        return true
    }
}

/// A file presented to libsndfile through its virtual I/O (`sf_open_virtual`) with 4 bytes replaced, e.g. a
/// WAV data chunk's size: reads go to the descriptor with `pread` (its own offset is not used), and the bytes at
/// `patchOffset` read as `patch`.
///
/// - Important: Not thread-safe: libsndfile calls it from the thread that uses the `SNDFILE*`. It must outlive
///   that handle (``AudioFileDecoder`` keeps it). It does not own the descriptor.
final class PatchedFileIO {
    let descriptor: Int32
    /// The file's size in bytes.
    let length: Int64
    /// Where libsndfile reads next.
    private(set) var position: Int64 = 0
    private let patchOffset: Int64
    private let patch: [UInt8]

    init(descriptor: Int32, length: Int64, patchOffset: Int64, patch: [UInt8]) {
        self.descriptor = descriptor
        self.length = length
        self.patchOffset = patchOffset
        self.patch = patch
    }

    /// The callbacks; `user_data` is an unretained `PatchedFileIO`. libsndfile copies the struct.
    static var callbacks: SF_VIRTUAL_IO {
        SF_VIRTUAL_IO(
            get_filelen: { user in patchedFile(user).length },
            seek: { offset, whence, user in patchedFile(user).seek(offset, whence: whence) },
            read: { pointer, count, user in patchedFile(user).read(into: pointer, count: count) },
            write: { _, _, _ in -1 },
            tell: { user in patchedFile(user).position })
    }

    fileprivate func seek(_ offset: sf_count_t, whence: Int32) -> sf_count_t {
        let target: Int64
        switch whence {
        case SEEK_SET: target = offset
        case SEEK_CUR: target = position + offset
        case SEEK_END: target = length + offset
        default: return -1
        }
        guard target >= 0 else { return -1 }
        position = target
        return position
    }

    /// Reads up to `count` bytes at ``position`` (fewer at the end of the file, -1 on an error), with the patch
    /// applied. The corresponding C function is `pread`.
    fileprivate func read(into pointer: UnsafeMutableRawPointer?, count: sf_count_t) -> sf_count_t {
        guard let pointer, count > 0 else { return 0 }
        var got = 0
        while got < Int(count) {
            let result = pread(descriptor, pointer + got, Int(count) - got, off_t(position) + off_t(got))
            if result < 0 && errno == EINTR { continue }
            if result < 0 { return got > 0 ? sf_count_t(got) : -1 }
            if result == 0 { break }
            got += result
        }
        let bytes = pointer.assumingMemoryBound(to: UInt8.self)
        for (index, byte) in patch.enumerated() {
            let at = patchOffset + Int64(index) - position
            if at >= 0 && at < Int64(got) { bytes[Int(at)] = byte }
        }
        position += Int64(got)
        return sf_count_t(got)
    }
}

/// The `PatchedFileIO` behind libsndfile's `user_data` (a free function: a C callback cannot capture context).
private func patchedFile(_ user: UnsafeMutableRawPointer?) -> PatchedFileIO {
    Unmanaged<PatchedFileIO>.fromOpaque(user!).takeUnretainedValue()
}
