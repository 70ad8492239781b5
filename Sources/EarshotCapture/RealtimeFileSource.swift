import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio

/// Replays an audio file, or raw samples from standard input, through the same producer loop and ring buffer as
/// live capture, paced by the monotonic clock at the input's sample rate (`earshotd --input FILE|-`).
///
/// - Files are decoded with ``AudioFileDecoder`` (libsndfile: WAV, FLAC, Ogg Vorbis/Opus, MP3, ...), mixed to mono
///   (mean of channels) and written at the file's own sample rate (the analysis resamples). The end of the file
///   ends capture with ``CaptureEnd/finished``.
/// - `-` (standard input) is raw **S16_LE mono** at `rawSampleRate` Hz (default 16000): no header, 2 bytes per
///   frame, little-endian, e.g. `arecord -f S16_LE -r 16000 -c 1 -t raw | earshotd --input -` or
///   `sox in.wav -t raw -e signed -b 16 -c 1 -r 16000 - | earshotd --input -`. End of input ends capture.
///
/// Pacing defaults to real time: chunks of 0.2 s (an ALSA capture's default period) are written no faster than the clock, so the daemon behaves as
/// with a microphone. Input that arrives slower than real time (a live pipe) is simply written as it comes. At any
/// pacing a full ring makes the thread wait for the analysis: nothing read from the input is ever dropped, so a
/// file gives the same events at any `--input-speed`.
public final class RealtimeFileSource: CaptureSource {
    /// The name that selects standard input.
    public static let standardInputName = "-"

    public let name: String
    public let format: CaptureFormat
    private let loop: ProducerLoop
    /// The file's reader (nil for standard input), for ``endNote``.
    private let fileReader: DecodedFileReader?

    /// Opens `path` (an audio file), or standard input when `path` is `-`.
    ///
    /// - Parameters:
    ///   - path: the file, or `-`.
    ///   - rawSampleRate: for `-`: the sample rate of the raw S16_LE mono input, in Hz (8000-192000).
    ///   - pacing: default ``CapturePacing/realTime``; `.clock(speed:)` > 1 replays faster (tests).
    ///   - chunkDuration: seconds per chunk written to the ring (default
    ///     ``CaptureConfiguration/defaultPeriodDuration``, 0.1).
    /// - Throws: ``EarshotError``: those of ``AudioFileDecoder/init(url:)`` (`.noInput` for a missing file, `.data`
    ///   for one that is not audio); `.usage` for a sample rate out of range.
    public convenience init(
        path: String, rawSampleRate: Int = 16_000, pacing: CapturePacing = .realTime,
        chunkDuration: Double = CaptureConfiguration.defaultPeriodDuration
    ) throws {
        if path == Self.standardInputName {
            try self.init(
                rawDescriptor: STDIN_FILENO, sampleRate: rawSampleRate, name: Self.standardInputName, pacing: pacing,
                chunkDuration: chunkDuration)
            return
        }
        let decoder = try AudioFileDecoder(url: URL(fileURLWithPath: path))
        let chunkFrames = Self.chunkFrames(rate: decoder.sampleRate, duration: chunkDuration)
        let reader = DecodedFileReader(decoder: decoder, chunkFrames: chunkFrames)
        self.init(
            name: path,
            format: CaptureFormat(
                sampleFormat: .floatLE, channels: decoder.channelCount, sampleRate: decoder.sampleRate,
                periodFrames: chunkFrames, bufferFrames: chunkFrames),
            reader: reader, pacing: pacing)
    }

    /// Reads raw S16_LE mono samples at `sampleRate` Hz from `rawDescriptor` (e.g. a pipe) until its end.
    ///
    /// The descriptor stays the caller's: it is not closed, and must stay open until the source has stopped.
    /// - Throws: ``EarshotError`` `.usage` when `sampleRate` is outside 8000-192000 Hz.
    public convenience init(
        rawDescriptor: Int32, sampleRate: Int, name: String = "-", pacing: CapturePacing = .realTime,
        chunkDuration: Double = CaptureConfiguration.defaultPeriodDuration
    ) throws {
        guard (8_000...192_000).contains(sampleRate) else {
            throw EarshotError(
                .usage, "raw input \"\(name)\": sample rate \(sampleRate) Hz is out of range (use 8000-192000, e.g. 16000)")
        }
        let chunkFrames = Self.chunkFrames(rate: sampleRate, duration: chunkDuration)
        self.init(
            name: name,
            format: CaptureFormat(
                sampleFormat: .s16LE, channels: 1, sampleRate: sampleRate, periodFrames: chunkFrames,
                bufferFrames: chunkFrames),
            reader: RawS16Reader(descriptor: rawDescriptor, name: name, sampleRate: sampleRate, chunkFrames: chunkFrames), pacing: pacing)
    }

    private init(name: String, format: CaptureFormat, reader: SourceReader, pacing: CapturePacing) {
        self.name = name
        self.format = format
        fileReader = reader as? DecodedFileReader
        loop = ProducerLoop(
            reader: reader, sampleRate: format.sampleRate, chunkFrames: format.periodFrames, pacing: pacing,
            waitsForRoom: true)
    }

    deinit { loop.stop(timeout: 1) }

    private static func chunkFrames(rate: Int, duration: Double) -> Int {
        max(1, min(1 << 16, Int((Double(rate) * max(duration, 0.001)).rounded())))
    }

    public var framesCaptured: Int64 { loop.framesCaptured }
    public var xrunCount: Int { loop.xrunCount }
    public var isRunning: Bool { loop.isRunning }
    public var nextFramePosition: Int64 { loop.nextFramePosition }
    public var end: CaptureEnd? { loop.end }
    public var secondsWithoutInput: Double { loop.secondsWithoutInput }
    /// A file cut short: the decoder's ``AudioFileDecoder/truncationWarning``, e.g. `cut.flac: truncated: decoded
    /// 225280 of 510495 frames the header promises; results cover only the first 14.08 s`.
    public var endNote: String? { fileReader?.truncationWarning }

    public func start(
        into ring: SampleRingBuffer, startingAt framePosition: Int64 = 0, queue: DispatchQueue,
        onEnd: @escaping @Sendable (CaptureEnd) -> Void
    ) throws {
        try loop.start(into: ring, startingAt: framePosition, name: name, queue: queue, onEnd: onEnd)
    }

    @discardableResult
    public func stop(timeout: Double = 2) -> Bool { loop.stop(timeout: timeout) }
}

/// Reads a decoded file chunk by chunk (on the producer thread).
package final class DecodedFileReader: SourceReader, @unchecked Sendable {
    private let decoder: AudioFileDecoder
    private var scratch: [Float]
    private var pendingError: EarshotError?

    package init(decoder: AudioFileDecoder, chunkFrames: Int) {
        self.decoder = decoder
        scratch = []
        scratch.reserveCapacity(chunkFrames)
    }

    package func threadWillStart() {}
    package func threadDidEnd() {}

    /// The decoder's warning once the file has ended (written by the producer thread before it ends; read after).
    package var truncationWarning: String? { decoder.truncationWarning }

    package func read(into destination: UnsafeMutablePointer<Float>, capacity: Int) -> SourceReadResult {
        scratch.removeAll(keepingCapacity: true)
        let count: Int
        do {
            count = try decoder.readMono(maxFrames: capacity, appendingTo: &scratch)
        } catch {
            pendingError = error
            return .failure(SourceFailure(function: "sf_readf_float", code: -EIO))
        }
        guard count > 0 else { return .end }
        scratch.withUnsafeBufferPointer { samples in
            if let base = samples.baseAddress { destination.update(from: base, count: count) }
        }
        return .frames(count)
    }

    package func error(for failure: SourceFailure) -> EarshotError {
        pendingError ?? EarshotError(.data, "\(decoder.displayPath): reading failed (\(failure.function))")
    }
}

/// Reads raw S16_LE mono from a descriptor, waiting at most 100 ms per call (`poll`) so stop requests are seen.
///
/// The stream's first bytes are checked with ``ContainerSignature``: a WAV, FLAC, Ogg or MP3 piped to `--input -`
/// fails with a `.data` error naming the fix, instead of being played as noise. Until enough bytes have arrived to
/// tell (4, or one MP3 frame), nothing is delivered; the check never blocks, and a stream that ends undecided is raw.
package final class RawS16Reader: SourceReader, @unchecked Sendable {
    private let descriptor: Int32
    private let name: String
    private let sampleRate: Int
    private let bytes: UnsafeMutablePointer<UInt8>
    private let byteCapacity: Int
    /// Bytes read but not yet delivered: the stream's start while it is being identified, or the low byte of a
    /// sample cut by an odd-length read. Reserved once, so the loop does not allocate.
    private var pending: [UInt8] = []
    private var identifying = true
    private var pendingError: EarshotError?

    package init(descriptor: Int32, name: String, sampleRate: Int, chunkFrames: Int) {
        self.descriptor = descriptor
        self.name = name
        self.sampleRate = sampleRate
        byteCapacity = max(chunkFrames * 2, 2 * ContainerSignature.longestPrefix)
        bytes = .allocate(capacity: byteCapacity)
        bytes.initialize(repeating: 0, count: byteCapacity)
        pending.reserveCapacity(2 * byteCapacity)
    }

    deinit { bytes.deallocate() }

    package func threadWillStart() {}
    package func threadDidEnd() {}

    package func read(into destination: UnsafeMutablePointer<Float>, capacity: Int) -> SourceReadResult {
        if !identifying, pending.count >= 2 { return deliver(into: destination, capacity: capacity) }
        var request = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let ready = poll(&request, 1, 100)
        if ready == 0 { return .idle }
        if ready < 0 {
            return errno == EINTR ? .idle : .failure(SourceFailure(function: "poll", code: -errno))
        }
        let got = Glibc.read(descriptor, bytes, byteCapacity)
        if got < 0 {
            let code = errno
            return code == EINTR || code == EAGAIN ? .idle : .failure(SourceFailure(function: "read", code: -code))
        }
        if got == 0 {
            // Too short to be a container: raw. A trailing odd byte is dropped: it is half a sample.
            identifying = false
            return pending.count >= 2 ? deliver(into: destination, capacity: capacity) : .end
        }
        pending.append(contentsOf: UnsafeBufferPointer(start: bytes, count: got))
        if identifying {
            switch ContainerSignature.identify(pending) {
            case .undecided: return .idle
            case .raw: identifying = false
            case .container(let kind):
                pendingError = EarshotError(
                    .data,
                    "standard input holds \(kind), but --input - reads raw S16_LE mono samples at \(sampleRate) Hz "
                        + "(give the file's path: --input FILE; or decode it: "
                        + "ffmpeg -i FILE -f s16le -ac 1 -ar \(sampleRate) - | earshotd --input -)")
                return .failure(SourceFailure(function: "read", code: -EPROTO))
            }
        }
        return deliver(into: destination, capacity: capacity)
    }

    /// Converts whole samples from `pending` (at most `capacity`), keeping a leftover odd byte.
    private func deliver(into destination: UnsafeMutablePointer<Float>, capacity: Int) -> SourceReadResult {
        let frames = min(pending.count / 2, capacity)
        for frame in 0..<frames {
            let value = Int16(bitPattern: UInt16(pending[2 * frame]) | UInt16(pending[2 * frame + 1]) << 8)
            destination[frame] = Float(value) * (1 / 32_768)
        }
        pending.removeFirst(2 * frames)
        return frames > 0 ? .frames(frames) : .idle
    }

    package func error(for failure: SourceFailure) -> EarshotError {
        if let pendingError { return pendingError }
        let text = String(cString: strerror(-failure.code))
        return EarshotError(.io, "cannot read raw input \"\(name)\": \(text)", cause: "\(failure.function): \(text)")
    }
}
