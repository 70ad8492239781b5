internal import COgg

/// How an Ogg file ends, from its last pages (RFC 3533): whether the stream was finished or the file was cut short.
///
/// Ogg states no length in its headers: libsndfile reads pages until the file ends, and says nothing when the
/// last one is cut off or was never the stream's last (it returns no error, and `sf_info.frames` is unknown or is
/// the last complete page's granule position). A finished stream ends with a complete page that carries the
/// end-of-stream flag; ``AudioFileDecoder`` names anything else in its truncation warning. The pages are found and
/// their CRCs checked by libogg (`ogg_sync_pageseek`).
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
    /// libogg's `ogg_sync_pageseek` walks `tail` from its start: it returns each page whose capture pattern, lacing
    /// values and CRC check out, and skips anything else ("OggS" inside packet data fails the CRC). It waits for
    /// more bytes at a page that reaches past the data it holds, which at the end of a file would hide the pages
    /// after a capture pattern inside packet data that claims more bytes than follow; so `tail` is followed by
    /// ``maximumPageBytes`` zero bytes (no capture pattern, and every page that starts in `tail` fits), and a page
    /// that reaches into them is not complete in the file. Memory: the tail and those zeros, in libogg's buffer.
    package static func of(tail: [UInt8]) -> OggEnding? {
        var sync = ogg_sync_state()
        guard ogg_sync_init(&sync) == 0 else { return nil }
        defer { ogg_sync_clear(&sync) }
        let padded = tail.count + maximumPageBytes
        guard let buffer = ogg_sync_buffer(&sync, padded) else { return nil }
        let bytes = UnsafeMutableRawPointer(buffer).bindMemory(to: UInt8.self, capacity: padded)
        tail.withUnsafeBufferPointer { source in
            if let base = source.baseAddress { bytes.update(from: base, count: source.count) }
        }
        (bytes + tail.count).initialize(repeating: 0, count: maximumPageBytes)
        guard ogg_sync_wrote(&sync, padded) == 0 else { return nil }

        var page = ogg_page()
        var position = 0  // where the next call of ogg_sync_pageseek starts, in `tail`
        var last: (end: Int, endOfStream: Bool)?
        while position < tail.count {
            let result = ogg_sync_pageseek(&sync, &page)
            if result > 0 {
                let end = position + result
                if end <= tail.count { last = (end, ogg_page_eos(&page) != 0) }
                position = end
            } else if result < 0 {
                position -= result  // bytes skipped to the next possible capture pattern
            } else {
                break  // no more pages (only the zeros are left)
            }
        }
        guard let last else { return nil }
        if last.end < tail.count { return .insidePage }
        return last.endOfStream ? .finished : .withoutEndOfStream
    }
}

/// Holes in an Ogg file's first logical stream (RFC 3533): pages that fail their checksum or are missing, which
/// libsndfile skips without a word, so that the decoded audio has a gap and every later time comes early.
///
/// Found by walking every page with libogg (`ogg_sync_pageseek`, which checks each page's CRC and skips bytes that
/// are not a valid page): a hole is bytes skipped between two pages of the stream, or a page sequence number that
/// is not the previous one plus 1. Each page's granule position says where its audio ends: samples at the stream's
/// rate for Vorbis, 48 kHz samples counting the pre-skip for Opus (RFC 7845).
package struct OggHoles: Equatable, Sendable {
    /// Holes found (0 when the stream is whole).
    package var count = 0
    /// The granule position of the last page before the first hole that has one (where the lost audio starts).
    package var granuleBeforeFirstHole: Int64 = 0
    /// The granule position of the stream's last page that has one: where its audio ends.
    package var lastGranule: Int64 = 0
    /// Opus' pre-skip (48 kHz samples at the start that a decoder drops), from its `OpusHead`; 0 for Vorbis.
    package var preSkip: Int64 = 0

    /// Walks the Ogg file open on `descriptor` (`size` bytes) in blocks of 64 KiB. Memory: one block and the page
    /// being assembled in libogg's buffer. The corresponding C functions are `pread`, `ogg_sync_pageseek`,
    /// `ogg_page_serialno`, `ogg_page_pageno` and `ogg_page_granulepos`.
    package static func scan(descriptor: Int32, size: Int64) -> OggHoles {
        var holes = OggHoles()
        var sync = ogg_sync_state()
        guard ogg_sync_init(&sync) == 0 else { return holes }
        defer { ogg_sync_clear(&sync) }
        var page = ogg_page()
        var offset: Int64 = 0
        var serial: Int32?
        var lastSequence = -1
        var lastKnownGranule: Int64 = 0
        var skipped = false
        let block = 1 << 16
        while true {
            let result = ogg_sync_pageseek(&sync, &page)
            if result > 0 {
                let pageSerial = ogg_page_serialno(&page)
                if serial == nil { serial = pageSerial }
                guard pageSerial == serial else { continue }  // another logical stream
                let sequence = Int(ogg_page_pageno(&page))
                if lastSequence >= 0 && (skipped || sequence != lastSequence + 1) {
                    if holes.count == 0 { holes.granuleBeforeFirstHole = lastKnownGranule }
                    holes.count += 1
                }
                skipped = false
                if lastSequence < 0, page.body_len >= 12,
                   Array(UnsafeBufferPointer(start: page.body, count: 8)) == Array("OpusHead".utf8) {
                    holes.preSkip = Int64(page.body[10]) | Int64(page.body[11]) << 8
                }
                lastSequence = sequence
                let granule = Int64(ogg_page_granulepos(&page))
                if granule >= 0 {
                    lastKnownGranule = granule
                    holes.lastGranule = granule
                }
            } else if result < 0 {
                if lastSequence >= 0 { skipped = true }
            } else {
                guard offset < size, let buffer = ogg_sync_buffer(&sync, block) else { break }
                let bytes = MP3Stream.bytes(of: descriptor, at: offset, count: Int(min(Int64(block), size - offset)))
                guard !bytes.isEmpty else { break }
                bytes.withUnsafeBufferPointer { source in
                    UnsafeMutableRawPointer(buffer).copyMemory(from: source.baseAddress!, byteCount: source.count)
                }
                guard ogg_sync_wrote(&sync, bytes.count) == 0 else { break }
                offset += Int64(bytes.count)
            }
        }
        return holes
    }
}
