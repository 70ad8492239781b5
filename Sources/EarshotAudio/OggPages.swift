/// How an Ogg file ends, from its last pages (RFC 3533): whether the stream was finished or the file was cut short.
///
/// Ogg states no length in its headers: libsndfile reads pages until the file ends, and says nothing when the
/// last one is cut off or was never the stream's last (it returns no error, and `sf_info.frames` is unknown or is
/// the last complete page's granule position). A finished stream ends with a complete page that carries the
/// end-of-stream flag; ``AudioFileDecoder`` names anything else in its truncation warning.
package enum OggEnding: Equatable, Sendable {
    /// The last page is complete and carries the end-of-stream flag.
    case finished
    /// The file ends inside a page: bytes follow the last complete page that are not a complete page.
    case insidePage
    /// The last page is complete but lacks the end-of-stream flag: the file was cut between two pages, or its
    /// writer never finished it.
    case withoutEndOfStream

    /// The largest Ogg page in bytes: a 27-byte header, 255 lacing values, 255 segments of 255 bytes.
    package static let maximumPageBytes = 27 + 255 + 255 * 255

    /// How the file whose last bytes are `tail` (the whole file when `tail` holds all of it) ends; nil when `tail`
    /// holds no complete page with a valid CRC, so that nothing can be said. Two maximum pages of tail (130614
    /// bytes) always hold the last complete page when the file has one within reach.
    ///
    /// The last complete page is the last "OggS" capture pattern whose header (version 0), lacing values and CRC
    /// check out: pattern bytes inside packet data fail the CRC.
    package static func of(tail: [UInt8]) -> OggEnding? {
        var start = tail.count - 27
        while start >= 0 {
            defer { start -= 1 }
            guard tail[start] == 0x4F, tail[start + 1] == 0x67, tail[start + 2] == 0x67, tail[start + 3] == 0x53,
                  tail[start + 4] == 0 else { continue }  // "OggS", stream structure version 0
            let segments = Int(tail[start + 26])
            guard start + 27 + segments <= tail.count else { continue }
            let bodyBytes = tail[(start + 27)..<(start + 27 + segments)].reduce(0) { $0 + Int($1) }
            let end = start + 27 + segments + bodyBytes
            guard end <= tail.count, checksumMatches(tail[start..<end]) else { continue }
            if end < tail.count { return .insidePage }
            return tail[start + 5] & 0x04 != 0 ? .finished : .withoutEndOfStream
        }
        return nil
    }

    /// Whether `page` (header, lacing values, body) carries its own CRC: Ogg's CRC-32 (polynomial 0x04C11DB7,
    /// not reflected, initial value 0) over the page with its CRC field (bytes 22-25, little-endian) taken as 0.
    static func checksumMatches(_ page: ArraySlice<UInt8>) -> Bool {
        let base = page.startIndex
        let stored = UInt32(page[base + 22]) | UInt32(page[base + 23]) << 8 | UInt32(page[base + 24]) << 16
            | UInt32(page[base + 25]) << 24
        var crc: UInt32 = 0
        for index in page.indices {
            let byte = (22..<26).contains(index - base) ? 0 : page[index]
            crc = (crc << 8) ^ crcTable[Int((crc >> 24) ^ UInt32(byte))]
        }
        return crc == stored
    }

    private static let crcTable: [UInt32] = (0..<256).map { index in
        var value = UInt32(index) << 24
        for _ in 0..<8 { value = value & 0x8000_0000 != 0 ? (value << 1) ^ 0x04C1_1DB7 : value << 1 }
        return value
    }
}
