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
