import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport

/// SHA-256 (FIPS 180-4), for the identity of model weights: a head model records the digest of the backbone's
/// weights file it was trained on, and the digest of its own tensor bytes to notice a damaged file.
///
/// Written here because the package takes no outside Swift packages and links no crypto library; it is checked
/// against the FIPS 180-4 example vectors and `sha256sum` in the tests.
package struct SHA256 {
    /// The digest size in bytes.
    package static let digestBytes = 32

    private static let roundConstants: [UInt32] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ]

    private var state: [UInt32] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    ]
    /// Bytes of an unfinished 64-byte block.
    private var pending: [UInt8] = []
    private var totalBytes: UInt64 = 0
    /// The message schedule, reused for every block.
    private var schedule = [UInt32](repeating: 0, count: 64)

    package init() {
        pending.reserveCapacity(64)
    }

    /// Adds `bytes` to the message.
    package mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        totalBytes &+= UInt64(bytes.count)
        var offset = 0
        if !pending.isEmpty {
            let take = min(64 - pending.count, bytes.count)
            pending.append(contentsOf: UnsafeRawBufferPointer(start: base, count: take))
            offset = take
            if pending.count == 64 {
                let block = pending
                block.withUnsafeBytes { compress($0.baseAddress!) }
                pending.removeAll(keepingCapacity: true)
            }
        }
        while bytes.count - offset >= 64 {
            compress(base + offset)
            offset += 64
        }
        if offset < bytes.count {
            pending.append(contentsOf: UnsafeRawBufferPointer(start: base + offset, count: bytes.count - offset))
        }
    }

    /// Adds `bytes` to the message.
    package mutating func update<Bytes: Collection>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        Array(bytes).withUnsafeBytes { update($0) }
    }

    /// Pads the message and returns the 32-byte digest. The hasher must not be used afterwards.
    package mutating func finalize() -> [UInt8] {
        let bitLength = totalBytes &* 8
        var tail: [UInt8] = [0x80]
        let afterMarker = (pending.count + 1) % 64
        let zeros = afterMarker <= 56 ? 56 - afterMarker : 120 - afterMarker
        tail.append(contentsOf: repeatElement(0, count: zeros))
        for shift in stride(from: 56, through: 0, by: -8) { tail.append(UInt8(truncatingIfNeeded: bitLength >> UInt64(shift))) }
        let savedTotal = totalBytes
        tail.withUnsafeBytes { update($0) }
        totalBytes = savedTotal
        precondition(pending.isEmpty)
        var digest: [UInt8] = []
        digest.reserveCapacity(Self.digestBytes)
        for word in state {
            digest += [UInt8(word >> 24), UInt8(truncatingIfNeeded: word >> 16), UInt8(truncatingIfNeeded: word >> 8),
                       UInt8(truncatingIfNeeded: word)]
        }
        return digest
    }

    /// The digest of `bytes` as 64 lowercase hexadecimal digits.
    package static func hex<Bytes: Collection>(of bytes: Bytes) -> String where Bytes.Element == UInt8 {
        var hasher = SHA256()
        hasher.update(bytes)
        return hexString(hasher.finalize())
    }

    /// The digest of a raw buffer as 64 lowercase hexadecimal digits.
    package static func hex(of bytes: UnsafeRawBufferPointer) -> String {
        var hasher = SHA256()
        hasher.update(bytes)
        return hexString(hasher.finalize())
    }

    /// Lowercase hexadecimal digits of `bytes`.
    package static func hexString(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The digest of the file at `path`, read in 1 MiB pieces.
    /// - Throws: `EarshotError(.noInput)` when the file cannot be opened, `.io` when a read fails.
    ///   The corresponding C functions are `open` and `read`.
    package static func hex(ofFileAt path: String) throws(EarshotError) -> String {
        let descriptor = try openRegularFile(path)
        defer { close(descriptor) }
        var hasher = SHA256()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress!, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .posix(.io, "cannot read \(path)", errno: errno)
            }
            if count == 0 { break }
            buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        }
        return hexString(hasher.finalize())
    }

    /// A fingerprint of the file at `path` without reading it all: the digest of its size (8 bytes, little-endian)
    /// followed by `samples` pieces of `pieceBytes` at evenly spaced offsets (the first at 0, the last ending at the
    /// end; the whole file when it is smaller than that). Tells one conversion of a weights file from another in
    /// well under a millisecond, where the full digest of 15 MB takes about 0.1 s.
    /// - Throws: `EarshotError(.noInput)` when the file cannot be opened, `.io` when a read fails.
    ///   The corresponding C functions are `open`, `fstat` and `pread`.
    package static func sampledHex(ofFileAt path: String, samples: Int = 64, pieceBytes: Int = 4096)
        throws(EarshotError) -> String
    {
        let descriptor = try openRegularFile(path)
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw .posix(.io, "cannot read \(path)", errno: errno) }
        let size = Int(status.st_size)
        var hasher = SHA256()
        withUnsafeBytes(of: UInt64(size).littleEndian) { hasher.update($0) }
        let piece = min(pieceBytes, size)
        let count = size > samples * pieceBytes ? samples : 1
        var buffer = [UInt8](repeating: 0, count: count == 1 ? size : piece)
        for index in 0..<count {
            let offset = count == 1 ? 0 : index * (size - piece) / (count - 1)
            var done = 0
            while done < buffer.count {
                let got = buffer.withUnsafeMutableBytes {
                    pread(descriptor, $0.baseAddress! + done, $0.count - done, off_t(offset + done))
                }
                if got < 0, errno == EINTR { continue }
                guard got > 0 else { throw .posix(.io, "cannot read \(path)", errno: got < 0 ? errno : EIO) }
                done += got
            }
            buffer.withUnsafeBytes { hasher.update($0) }
        }
        return hexString(hasher.finalize())
    }

    /// A descriptor for reading the regular file at `path` (never waiting on a FIFO: `RegularFile`).
    /// - Throws: `EarshotError(.noInput)` naming the path when it cannot be opened.
    private static func openRegularFile(_ path: String) throws(EarshotError) -> Int32 {
        do {
            return try RegularFile.open(path)
        } catch {
            throw .posix(.noInput, "cannot open \(path)", errno: error.errno)
        }
    }

    /// One 64-byte block (big-endian words), FIPS 180-4 section 6.2.2.
    private mutating func compress(_ block: UnsafeRawPointer) {
        schedule.withUnsafeMutableBufferPointer { w in
            for t in 0..<16 {
                w[t] = UInt32(bigEndian: block.loadUnaligned(fromByteOffset: t * 4, as: UInt32.self))
            }
            for t in 16..<64 {
                let s0 = w[t - 15].rotatedRight(7) ^ w[t - 15].rotatedRight(18) ^ (w[t - 15] >> 3)
                let s1 = w[t - 2].rotatedRight(17) ^ w[t - 2].rotatedRight(19) ^ (w[t - 2] >> 10)
                w[t] = w[t - 16] &+ s0 &+ w[t - 7] &+ s1
            }
            Self.roundConstants.withUnsafeBufferPointer { k in
                state.withUnsafeMutableBufferPointer { h in
                    var a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7]
                    for t in 0..<64 {
                        let s1 = e.rotatedRight(6) ^ e.rotatedRight(11) ^ e.rotatedRight(25)
                        let choice = (e & f) ^ (~e & g)
                        let t1 = hh &+ s1 &+ choice &+ k[t] &+ w[t]
                        let s0 = a.rotatedRight(2) ^ a.rotatedRight(13) ^ a.rotatedRight(22)
                        let majority = (a & b) ^ (a & c) ^ (b & c)
                        let t2 = s0 &+ majority
                        hh = g; g = f; f = e; e = d &+ t1
                        d = c; c = b; b = a; a = t1 &+ t2
                    }
                    h[0] &+= a; h[1] &+= b; h[2] &+= c; h[3] &+= d
                    h[4] &+= e; h[5] &+= f; h[6] &+= g; h[7] &+= hh
                }
            }
        }
    }
}

extension UInt32 {
    @inline(__always) fileprivate func rotatedRight(_ count: UInt32) -> UInt32 {
        (self >> count) | (self << (32 - count))
    }
}
