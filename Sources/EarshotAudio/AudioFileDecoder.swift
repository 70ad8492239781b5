internal import CSndFile
import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport

/// Reads an audio file as 32-bit float frames at the file's own sample rate: MP3 with libmpg123, everything else
/// with libsndfile.
///
/// Formats: MP3 (MPEG-1/2/2.5 layers I-III: a file that starts with an MPEG audio frame sync, or with an ID3v2 tag
/// that no other container follows) through libmpg123 directly, with its messages off (``MP3Stream``); the rest
/// through the system libsndfile, on Debian 12 (libsndfile 1.2) WAV (PCM 8-bit unsigned, 16/24/32-bit signed,
/// 32/64-bit float, WAVE_FORMAT_EXTENSIBLE, RF64), AIFF, FLAC, Ogg Vorbis and Ogg Opus.
/// Samples come out at full scale: integer PCM is divided by 2^(bits-1) (8-bit unsigned is offset first), so the
/// largest negative integer reads as -1.0. Float files pass through unchanged (they may exceed 1.0), except
/// non-finite and absurd values, which ``SampleSanitizer`` maps (NaN -> 0, beyond ±1000 including ±inf -> ±1000)
/// so that one bad sample cannot turn the analysis into NaN.
///
/// Bad input is refused with one ``EarshotError`` line that names the file (as given, e.g. `x.wav`) and the cause:
/// - `.noInput` (66): the file is missing, is a directory, is not a regular file (device, FIFO, socket), or cannot
///   be opened (no permission). A directory is `.noInput` because, as for `cat dir`, there is no input *file* there.
///   A name that is not UTF-8 reaches Swift with U+FFFD in place of its bytes; the file that reads so is opened by
///   its own bytes (``rawPath(repairing:)``), and only when two files read the same is it refused.
/// - `.data` (65): an empty file, a file libsndfile does not recognise as audio, MP3 data inside a WAV (RIFF)
///   container (libsndfile 1.2 decodes it only partly and floods stderr from libmpg123), a sample rate outside
///   ``supportedSampleRates`` (a damaged or hostile header; a WAV whose header says 0 Hz or 0 channels:
///   `x.wav: the header's sample rate is 0: not a playable WAV (...)`), a WAV or AIFF whose data chunk is cut
///   short before its first frame (`x.wav: truncated: the header declares 2000 bytes of audio data but the file
///   holds 1 (...)`), any other file cut short before its first frame, a decoding error part-way (damage inside
///   the file), or a file with no audio frames.
///
/// A file cut short after some audio (WAV, AIFF, FLAC, Ogg Vorbis/Opus, MP3) is not an error: what decodes is used,
/// as players do, and once the end is reached ``truncationWarning`` names it (`NAME: truncated: ...`):
/// - WAV and AIFF: a data chunk shorter than its header declares, read as far as it goes; the frames the header
///   promises are those its `fact` (WAV) or `COMM` (AIFF) chunk states, else the declared bytes over the bytes per
///   frame. A data chunk declaring 0 bytes, or 0xFFFFFFFF, with samples after it is not cut short: recorders
///   writing to a pipe leave those sizes, and the samples there are decoded.
/// - FLAC (any other format whose header states an exact frame count): fewer frames than the header states, or a
///   decoding error once libsndfile has read to the end of the file (a FLAC cut inside a frame: "flac decoder
///   lost sync").
/// - Ogg: the container states no length, so the last pages tell (``OggEnding``): the file ends inside a page, or
///   its last page lacks the end-of-stream flag (cut between two pages, or a writer that never finished).
/// - MP3: its Xing/Info or VBRI header states a length and it decodes more than one MPEG frame (1152 samples)
///   short of it, or the file ends inside an audio frame (the bytes after the last decoded frame start a frame
///   header whose frame reaches past the end of the file). An MP3 cut exactly between two frames, without such a
///   header, cannot be told from a short one. An MP3 that ends before its first complete frame (or inside its
///   ID3v2 tag) is refused at open with `.data`, `NAME: truncated: ...`.
///
/// - Important: Not thread-safe; use one decoder from one thread at a time. The class owns the file descriptor and
///   the `SNDFILE*`; both are closed in `deinit`.
public final class AudioFileDecoder {
    /// The file, as passed to ``init(url:)``.
    public let url: URL
    /// The file name used in error lines: the path as the caller gave it (`URL.relativePath`).
    public let displayPath: String
    /// Frames per second of the file, in Hz (within ``supportedSampleRates``).
    public let sampleRate: Int
    /// Interleaved channels per frame (>= 1).
    public let channelCount: Int
    /// The frame count the file declares, or nil when its container does not say (e.g. an Ogg stream without a
    /// final granule position). For MP3 without a Xing/LAME header this is libmpg123's estimate; for a WAV or AIFF
    /// whose data chunk is cut short, what its header promises (more than the file holds).
    public let declaredFrameCount: Int64?
    /// libsndfile's names of the container and the encoding, e.g. `WAV (Microsoft), Signed 16 bit PCM`.
    public let formatDescription: String
    /// Frames read so far.
    public private(set) var framesRead: Int64 = 0
    /// True once the end of the file was reached (further reads return 0).
    public private(set) var isAtEnd = false
    /// Set at the end of a file cut short (see the type's description): one line without a program prefix, e.g.
    /// `cut.flac: truncated: decoded 225280 of 510495 frames the header promises; results cover only the first
    /// 14.08 s` (the same for a WAV or AIFF), `cut.opus: truncated: the file ends inside an Ogg page; results cover
    /// only the first 16.99 s`,
    /// `cut.ogg: truncated: the last Ogg page lacks the end-of-stream flag; results cover only the first 16.21 s`,
    /// `cut.mp3: truncated: the MP3 ends early (decoded 2.48 of 5.02 s); the analysis covers what was decoded` (a
    /// Xing/Info or VBRI header states the length), or `cut.mp3: truncated: the MP3 ends inside an audio frame
    /// after 2.48 s; the analysis covers what was decoded`. Also set for an Ogg file with damaged pages in the
    /// middle, which libsndfile skips (``OggHoles``): `d.ogg: damaged: 2.06 s of audio after 13.18 s is missing (Ogg
    /// pages that fail their checksum were skipped); later times are 2.06 s early` (joined to a truncation line with
    /// `; ` when the file is also cut short). Nil otherwise.
    public private(set) var truncationWarning: String?

    private let fileDescriptor: Int32
    /// The file's size in bytes when it was opened.
    private let fileSize: Int64
    /// What libsndfile reads through instead of the descriptor, for a WAV written to a pipe (``RIFFHeader``); nil
    /// otherwise. Kept alive as long as the `SNDFILE*`.
    private let patchedIO: PatchedFileIO?
    /// Whether libsndfile reads the file as Ogg (Vorbis, Opus), whose end ``OggEnding`` checks.
    private let isOgg: Bool
    /// Whether that Ogg stream is Opus (granule positions at 48 kHz after a pre-skip) rather than Vorbis.
    private let isOpus: Bool
    /// What decodes the file: libsndfile's `SNDFILE*`, or libmpg123 for MP3.
    private enum Backend {
        case sndfile(OpaquePointer)
        case mp3(MP3Stream)
    }
    private let backend: Backend
    /// Whether `declaredFrameCount` is exact, so that decoding fewer frames means the file was cut short.
    private let frameCountIsExact: Bool
    /// Whether this is an MP3 whose header states its length (``truncationWarning``).
    private let mp3LengthIsStated: Bool
    /// Interleaved scratch for `readMono` (grows to the largest request, at most ``scratchSampleLimit``, then reused).
    private var interleavedScratch: [Float] = []

    /// The sample rates a file may have, in Hz: 1000 (below any audio format in use; 8000 Hz telephony is the
    /// lowest common one) to 768000 (the highest rate of current converters, 16x 48 kHz). A header outside this
    /// range is damaged or hostile: a claimed 2147483647 Hz would size buffers in gigabytes, a claimed 1 Hz would
    /// make a second of audio last hours.
    public static let supportedSampleRates = 1_000...768_000

    /// The most interleaved samples one `sf_readf_float` call of `readMono` reads (1 Mi samples, 4 MiB), so that
    /// its scratch stays bounded whatever the channel count (libsndfile allows up to 1024 channels).
    package static let scratchSampleLimit = 1 << 20

    /// What ``rawPath(repairing:)`` found.
    package enum RawPath: Equatable {
        /// The path's bytes, NUL-terminated.
        case found([CChar])
        /// Several entries of one directory read as the repaired component (`caf\xe9.wav` and `caf\xe8.wav` both
        /// read `caf\u{FFFD}.wav`).
        case ambiguous
        /// No entry reads as a component.
        case missing
        /// A directory on the way cannot be listed (no permission to read it).
        case unreadable
    }

    /// The bytes of `path` with each component that holds U+FFFD replaced by the bytes of the one entry of its
    /// directory whose name, repaired as Swift repairs bytes that are not UTF-8, reads the same (`caf\xe9.wav` for
    /// `caf\u{FFFD}.wav`). The corresponding C functions are `opendir`, `readdir` and `closedir`.
    package static func rawPath(repairing path: String) -> RawPath {
        var bytes: [UInt8] = path.hasPrefix("/") ? [UInt8(ascii: "/")] : []
        let components = path.split(separator: "/", omittingEmptySubsequences: true)
        for (index, component) in components.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: "/")) }
            guard component.contains("\u{FFFD}") else {
                bytes += component.utf8
                continue
            }
            let directory = bytes.isEmpty ? [UInt8(ascii: ".")] : bytes
            guard let stream = (directory + [0]).withUnsafeBufferPointer({ buffer in
                buffer.withMemoryRebound(to: CChar.self) { opendir($0.baseAddress!) }
            }) else { return errno == ENOENT || errno == ENOTDIR ? .missing : .unreadable }
            defer { closedir(stream) }
            var matches: [[UInt8]] = []
            while let entry = readdir(stream) {
                let name = withUnsafeBytes(of: &entry.pointee.d_name) { Array($0.prefix(while: { $0 != 0 })) }
                // Compared as bytes: String's == would also match another Unicode normalization of the name.
                if String(decoding: name, as: UTF8.self).utf8.elementsEqual(component.utf8) { matches.append(name) }
            }
            guard matches.count <= 1 else { return .ambiguous }
            guard let match = matches.first else { return .missing }
            bytes += match
        }
        return .found((bytes + [0]).map { CChar(bitPattern: $0) })
    }

    /// Opens `url` and reads its header.
    ///
    /// - Throws: ``EarshotError`` `.noInput` (missing, directory, not a regular file, no permission) or `.data`
    ///   (empty, not audio, MP3 in a WAV container, a WAV data chunk cut before its first frame, invalid header values,
    ///   a sample rate outside ``supportedSampleRates``: `x.wav: sample rate 1 Hz is out of range (...)`; an MP3
    ///   that ends before its first complete frame: `x.mp3: truncated: the MP3 ends inside its first audio frame
    ///   (417 bytes; ...)`, see ``MP3Stream``). The corresponding C functions are `open`, `fstat`, `sf_open_fd`,
    ///   `sf_command(SFC_GET_LOG_INFO)` and, for MP3, libmpg123's `mpg123_open_fd` and `mpg123_getformat`.
    public init(url: URL) throws(EarshotError) {
        self.url = url
        let name = url.relativePath
        displayPath = name

        // Our own open() so that errno names the cause; O_NONBLOCK so that a FIFO cannot block us (it is refused below).
        var descriptor = open(url.path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        var number = errno
        var repaired: RawPath?
        if descriptor < 0, number == ENOENT, url.path.contains("\u{FFFD}") {
            // A name that is not UTF-8 reached us with U+FFFD in place of its bytes (Swift's command line and
            // directory listings repair them, trial 5 #3): open the one entry that reads so, by its own bytes.
            repaired = Self.rawPath(repairing: url.path)
            if case .found(let raw) = repaired {
                descriptor = raw.withUnsafeBufferPointer { open($0.baseAddress!, O_RDONLY | O_CLOEXEC | O_NONBLOCK) }
                number = descriptor < 0 ? errno : 0
            }
        }
        guard descriptor >= 0 else {
            let text = String(cString: strerror(number))
            switch number {
            case ENOENT where name == "-":
                // `-` means standard input to many tools; here it is a file name like any other.
                throw EarshotError(
                    .usage,
                    "-: reading audio from standard input is not supported (save it to a file and give the file's path, e.g. ffmpeg -i IN -f wav /tmp/in.wav; a file named - is ./-)",
                    cause: text)
            case ENOENT where repaired == .ambiguous:
                throw EarshotError(
                    .noInput,
                    "\(name): the file name is not valid UTF-8, and more than one file's name reads as it, so earshot cannot tell which to open (rename them, e.g. convmv -f latin1 -t utf8 --notest FILE)",
                    cause: text)
            case ENOENT where repaired == .unreadable:
                throw EarshotError(
                    .noInput,
                    "\(name): the file name is not valid UTF-8, and its directory cannot be listed to find it (rename the file, e.g. convmv -f latin1 -t utf8 --notest FILE)",
                    cause: text)
            case ENOENT:
                throw EarshotError(.noInput, "\(name): no such file (check the path)", cause: text)
            case EACCES, EPERM:
                throw EarshotError(.noInput, "\(name): permission denied (make the file readable for this user, e.g. chmod a+r)", cause: text)
            default:
                throw EarshotError(.noInput, "\(name): cannot open: \(text) (check the path)", cause: text)
            }
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            let text = String(cString: strerror(errno))
            close(descriptor)
            throw EarshotError(.noInput, "\(name): cannot read its status: \(text)", cause: text)
        }
        let fileType = status.st_mode & S_IFMT
        if fileType == S_IFDIR {
            close(descriptor)
            throw EarshotError(.noInput, "\(name): is a directory, not an audio file (name the audio files inside it)")
        }
        guard fileType == S_IFREG else {
            close(descriptor)
            throw EarshotError(.noInput, "\(name): not a regular file (give an audio file, not a device, pipe or socket)")
        }
        guard status.st_size > 0 else {
            close(descriptor)
            throw EarshotError(.data, "\(name): empty file (0 bytes; there is no audio in it)")
        }

        let leading = Self.leadingBytes(of: descriptor)
        if Self.isMP3(leading: leading, descriptor: descriptor) {
            let stream: MP3Stream
            do {
                stream = try MP3Stream(descriptor: descriptor, fileSize: Int64(status.st_size), name: name)
            } catch {
                close(descriptor)
                throw error
            }
            fileDescriptor = descriptor
            fileSize = Int64(status.st_size)
            patchedIO = nil
            isOgg = false
            isOpus = false
            backend = .mp3(stream)
            formatDescription = "MPEG-1/2 Audio, MPEG Layer " + ["I", "II", "III"][max(1, min(3, stream.layer)) - 1]
            sampleRate = stream.sampleRate
            channelCount = stream.channelCount
            declaredFrameCount = stream.declaredFrameCount
            frameCountIsExact = false
            mp3LengthIsStated = Self.statesMP3Length(leading)
            return
        }

        var info = SF_INFO()
        // A WAV whose data chunk declares 0 bytes, samples following (written to a pipe): libsndfile is shown the
        // size the file holds, through its virtual I/O, and decodes it as any other WAV.
        let fileBytes = Int64(status.st_size)
        var patchedIO: PatchedFileIO?
        let riff = RIFFHeader(leading: leading)
        if let header = riff, header.declaresNoDataBeforeSamples(leading: leading, fileSize: fileBytes) {
            let size = UInt32(min(fileBytes - Int64(header.dataStart), 0xFFFF_FFFF))
            patchedIO = PatchedFileIO(
                descriptor: descriptor, length: fileBytes, patchOffset: Int64(header.dataSizeOffset),
                patch: (0..<4).map { UInt8(truncatingIfNeeded: size >> (8 * $0)) })
        }
        // libsndfile's error of a failed open is process-wide: read under the lock every open takes.
        let opening: Result<OpaquePointer, SndFileOpening.Failure>
        if let patchedIO {
            opening = SndFileOpening.open {
                var callbacks = PatchedFileIO.callbacks
                return sf_open_virtual(&callbacks, Int32(SFM_READ), &info, Unmanaged.passUnretained(patchedIO).toOpaque())
            }
        } else {
            // libsndfile owns a duplicate (closed by it however the open ends); `descriptor` stays ours and is
            // closed exactly once, here or in deinit.
            opening = SndFileOpening.open(duplicating: descriptor) { sf_open_fd($0, Int32(SFM_READ), &info, Int32(SF_TRUE)) }
        }
        let opened: OpaquePointer
        switch opening {
        case .success(let handle):
            opened = handle
        case .failure(let failure):
            let code = failure.code
            let text = Self.trimmed(failure.text)
            close(descriptor)
            if code == SndFileOpening.noDuplicate {
                throw EarshotError(.noInput, "\(name): cannot open: \(text) (check the path)", cause: text)
            }
            // libsndfile's words for these ("SF_INFO struct incomplete", "Channel count is zero") do not say what is
            // wrong with the file; sox can read it with the value given (`-r`/`-c` before the input override it).
            if let header = riff {
                if header.sampleRate == 0 {
                    throw EarshotError(.data, "\(name): the header's sample rate is 0: not a playable WAV (re-export the recording, or if you know its rate, rewrite the header: sox -r RATE IN.wav OUT.wav)", cause: text)
                }
                if header.channels == 0 {
                    throw EarshotError(.data, "\(name): the header's channel count is 0: not a playable WAV (re-export the recording, or if you know its channel count, rewrite the header: sox -c CHANNELS IN.wav OUT.wav)", cause: text)
                }
            }
            // libsndfile knew the format but the file is damaged or cut short (SF_ERR_MALFORMED_FILE, or one of its
            // format-specific errors such as "Error in WAV file. No 'data' chunk marker"): converting it to another
            // format is not the fix, getting an intact copy is.
            if Self.isDamaged(code: code, text: text) {
                throw EarshotError(.data, "\(name): damaged or truncated audio file (libsndfile: \(text); re-export or re-copy it)", cause: text)
            }
            throw EarshotError(.data, "\(name): not an audio file libsndfile can read (\(text); use WAV, FLAC, Ogg or MP3)", cause: text)
        }
        fileDescriptor = descriptor
        fileSize = fileBytes
        self.patchedIO = patchedIO
        backend = .sndfile(opened)

        let major = Int(info.format) & Int(SF_FORMAT_TYPEMASK)
        let subtype = Int(info.format) & Int(SF_FORMAT_SUBMASK)
        formatDescription = "\(Self.formatName(major)), \(Self.formatName(subtype))"
        sampleRate = Int(info.samplerate)
        channelCount = Int(info.channels)
        let frames = Int64(info.frames)
        // A data chunk shorter than its header declares (a WAV or AIFF cut short): libsndfile counts the frames the
        // file holds, and decodes them; the count the header promises is what makes the end a truncation.
        let log = Self.logInfo(of: opened)
        let shortChunk = Self.shortDataChunk(log: log)
        let promised = shortChunk.flatMap {
            Self.promisedFrameCount(declaredBytes: $0.declared, presentBytes: $0.present, frames: frames, log: log)
        }
        declaredFrameCount = promised ?? (frames > 0 && frames < Int64.max ? frames : nil)
        frameCountIsExact = major != Int(SF_FORMAT_OGG) && major != Int(SF_FORMAT_MPEG)
            && subtype != Int(SF_FORMAT_MPEG_LAYER_III)
        isOgg = major == Int(SF_FORMAT_OGG)
        isOpus = isOgg && subtype == Int(SF_FORMAT_OPUS)
        // MP3 goes to libmpg123 (``isMP3(leading:descriptor:)`` follows libsndfile's own test), so this stays false.
        mp3LengthIsStated = false

        // Past this point the stored properties are set, so deinit closes the handle and descriptor when we throw.
        let riffMajors = [Int(SF_FORMAT_WAV), Int(SF_FORMAT_WAVEX), Int(SF_FORMAT_RF64)]
        if riffMajors.contains(major) && subtype == Int(SF_FORMAT_MPEG_LAYER_III) {
            throw EarshotError(.data, "\(name): MP3 data in a WAV (RIFF) container, which libsndfile cannot decode reliably (convert it to PCM: ffmpeg -i IN.wav -c:a pcm_s16le OUT.wav)")
        }
        guard sampleRate > 0, channelCount > 0 else {
            throw EarshotError(.data, "\(name): invalid audio header (sample rate \(sampleRate) Hz, \(channelCount) channels)")
        }
        guard Self.supportedSampleRates.contains(sampleRate) else {
            let range = Self.supportedSampleRates
            throw EarshotError(.data, "\(name): sample rate \(sampleRate) Hz is out of range (audio files must be \(range.lowerBound) to \(range.upperBound) Hz; the header is damaged or the file is not really audio)")
        }
        if let (declared, present) = shortChunk, promised == nil {
            throw EarshotError(.data, "\(name): truncated: the header declares \(declared) bytes of audio data but the file holds \(present) (the copy or recording was cut short; copy it again)")
        }
    }

    deinit {
        if case .sndfile(let handle) = backend { sf_close(handle) }
        // An MP3Stream does not own the descriptor (mpg123_close leaves it open); it is deleted after this.
        close(fileDescriptor)
    }

    /// Reads up to `maxFrames` frames of interleaved samples (`[frames, channelCount]`, full scale, sanitized by
    /// ``SampleSanitizer``) and appends them to `output`. Returns the number of frames appended; 0 means the end of
    /// the file.
    ///
    /// - Throws: ``EarshotError`` `.data` when libsndfile reports a decoding error before the end of the file (damage
    ///   inside it), when the file holds no frames at all, or when it ends before its first frame decodes. A file
    ///   that ends early after some frames is not an error: ``truncationWarning`` says so. The corresponding C
    ///   function is `sf_readf_float`.
    public func read(maxFrames: Int, appendingTo output: inout [Float]) throws(EarshotError) -> Int {
        guard maxFrames > 0, !isAtEnd else { return 0 }
        let start = output.count
        output.append(contentsOf: repeatElement(0, count: maxFrames * channelCount))
        let channels = channelCount
        let got = output.withUnsafeMutableBufferPointer { buffer in
            let got = decodeFrames(into: buffer.baseAddress! + start, frames: maxFrames)
            SampleSanitizer.sanitize(buffer.baseAddress! + start, count: max(got, 0) * channels)
            return got
        }
        output.removeLast((maxFrames - max(got, 0)) * channelCount)
        return try finishRead(got)
    }

    /// Reads up to `maxFrames` frames, sanitizes them (``SampleSanitizer``), mixes them to mono (the mean of the
    /// channels, computed as `(c0 + c1 + ...) / channelCount` in Float, as numpy's `mean(axis=1)` does for the
    /// reference) and appends them to `output`. Returns the number of frames appended; 0 means the end of the file.
    /// With several channels one call reads at most ``scratchSampleLimit`` / `channelCount` frames (fewer than
    /// `maxFrames` is not the end).
    ///
    /// - Throws: as ``read(maxFrames:appendingTo:)``.
    public func readMono(maxFrames: Int, appendingTo output: inout [Float]) throws(EarshotError) -> Int {
        if channelCount == 1 { return try read(maxFrames: maxFrames, appendingTo: &output) }
        guard maxFrames > 0, !isAtEnd else { return 0 }
        let frames = min(maxFrames, max(1, Self.scratchSampleLimit / channelCount))
        let needed = frames * channelCount
        if interleavedScratch.count < needed {
            interleavedScratch = [Float](repeating: 0, count: needed)
        }
        let channels = channelCount
        let got = interleavedScratch.withUnsafeMutableBufferPointer { buffer in
            let got = decodeFrames(into: buffer.baseAddress!, frames: frames)
            SampleSanitizer.sanitize(buffer.baseAddress!, count: max(got, 0) * channels)
            return got
        }
        if got > 0 {
            let divisor = Float(channels)
            interleavedScratch.withUnsafeBufferPointer { source in
                for frame in 0..<got {
                    var sum: Float = 0
                    let base = frame * channels
                    for channel in 0..<channels { sum += source[base + channel] }
                    output.append(sum / divisor)
                }
            }
        }
        return try finishRead(got)
    }

    /// Reads the rest of the file, mixed to mono (see ``readMono(maxFrames:appendingTo:)``).
    ///
    /// - Returns: `[frames]` samples at ``sampleRate``.
    /// - Throws: as ``read(maxFrames:appendingTo:)``.
    public func readAllMono() throws(EarshotError) -> [Float] {
        var samples: [Float] = []
        // The declared count is only a hint (a FLAC header may claim billions of frames): reserve at most 16 Mi.
        if let declared = declaredFrameCount, declared > framesRead {
            samples.reserveCapacity(Int(min(declared - framesRead, 1 << 24)))
        }
        while try readMono(maxFrames: 65_536, appendingTo: &samples) > 0 {}
        return samples
    }

    /// True when `sf_open`'s failure means a recognised format in a damaged or truncated file: SF_ERR_MALFORMED_FILE,
    /// or one of libsndfile's internal format errors (codes above SF_ERR_UNSUPPORTED_ENCODING) whose text says so
    /// ("Error in WAV file...", "...malformed...", "...truncated..."). Unrecognised formats and unsupported encodings
    /// are not.
    package static func isDamaged(code: Int32, text: String) -> Bool {
        if code == Int32(SF_ERR_MALFORMED_FILE) { return true }
        guard code > Int32(SF_ERR_UNSUPPORTED_ENCODING) else { return false }
        let lower = text.lowercased()
        return lower.hasPrefix("error in ") || lower.contains("malformed") || lower.contains("truncated")
    }

    /// Decodes up to `frames` interleaved frames into `output`; returns how many (0 or fewer at the end or on an
    /// error, which ``finishRead(_:)`` reports). The corresponding C functions are `sf_readf_float` and
    /// `mpg123_read`.
    private func decodeFrames(into output: UnsafeMutablePointer<Float>, frames: Int) -> Int {
        switch backend {
        case .sndfile(let handle): Int(sf_readf_float(handle, output, sf_count_t(frames)))
        case .mp3(let stream): stream.read(into: output, frames: frames)
        }
    }

    /// Bookkeeping after a read returned `got`: errors, the end of the file and truncation.
    private func finishRead(_ got: Int) throws(EarshotError) -> Int {
        if got > 0 { framesRead += Int64(got) }
        guard case .sndfile(let handle) = backend else {
            if case .mp3(let stream) = backend { return try finishMP3Read(got, stream: stream) }
            return got
        }
        let code = sf_error(handle)
        if code != 0 {
            isAtEnd = true
            let text = Self.trimmed(String(cString: sf_strerror(handle)))
            guard decoderReachedEndOfFile() else {
                throw EarshotError(.data, "\(displayPath): decoding failed after \(framesRead) frames (\(text); the file is damaged)", cause: text)
            }
            // The error came with the end of the file: a file cut inside a frame. What decoded is kept.
            guard framesRead > 0 else {
                let what = declaredFrameCount.map { "the header declares \($0) frames but the data ends after 0" }
                    ?? "the data ends before the first frame"
                throw EarshotError(.data, "\(displayPath): truncated: \(what) (\(text); the copy or recording was cut short; copy it again)", cause: text)
            }
            let what = declaredFrameCount.map { "decoded \(framesRead) of \($0) frames the header promises" }
                ?? "the data ends mid-stream (\(text))"
            truncationWarning = shortfallLine(what)
            return max(got, 0)
        }
        guard got > 0 else {
            isAtEnd = true
            if framesRead == 0 {
                throw EarshotError(.data, "\(displayPath): no audio frames (the file holds a header but no samples)")
            }
            if frameCountIsExact, let declared = declaredFrameCount, framesRead < declared {
                truncationWarning = shortfallLine("decoded \(framesRead) of \(declared) frames the header promises")
            } else if isOgg {
                let tailBytes = Int(min(fileSize, Int64(2 * OggEnding.maximumPageBytes)))
                let tail = MP3Stream.bytes(of: fileDescriptor, at: fileSize - Int64(tailBytes), count: tailBytes)
                switch OggEnding.of(tail: tail) {
                case .insidePage: truncationWarning = shortfallLine("the file ends inside an Ogg page")
                case .withoutEndOfStream: truncationWarning = shortfallLine("the last Ogg page lacks the end-of-stream flag")
                case .finished, nil: break
                }
                if let gap = oggGapLine() {
                    truncationWarning = [gap, truncationWarning].compactMap { $0 }.joined(separator: "; ")
                }
            }
            return 0
        }
        return got
    }

    /// The warning for an Ogg file with damaged or missing pages in the middle (``OggHoles``), which libsndfile
    /// skips: `d.ogg: damaged: 2.05 s of audio after 13.17 s is missing (Ogg pages that fail their checksum were
    /// skipped); later times are 2.05 s early`. The seconds missing are the frames the last page's granule position
    /// promises less the frames decoded; nil when no page is missing or nothing was lost.
    private func oggGapLine() -> String? {
        let holes = OggHoles.scan(descriptor: fileDescriptor, size: fileSize)
        guard holes.count > 0 else { return nil }
        let rate = Double(sampleRate)
        let promised: Double, start: Double
        if isOpus {
            promised = Double(holes.lastGranule - holes.preSkip) * rate / 48_000
            start = Double(max(0, holes.granuleBeforeFirstHole - holes.preSkip)) / 48_000
        } else {
            promised = Double(holes.lastGranule)
            start = Double(holes.granuleBeforeFirstHole) / rate
        }
        let missing = (promised - Double(framesRead)) / rate
        guard missing >= 0.01 else { return nil }
        let seconds = String(cFormat: "%.2f", missing)
        let place = holes.count == 1
            ? "after \(String(cFormat: "%.2f", start)) s"
            : "in \(holes.count) gaps, the first after \(String(cFormat: "%.2f", start)) s,"
        return "\(displayPath): damaged: \(seconds) s of audio \(place) is missing (Ogg pages that fail their checksum were skipped); later times are \(seconds) s early"
    }

    /// The ``truncationWarning`` line for a file that ended early, `what` saying how.
    private func shortfallLine(_ what: String) -> String {
        let seconds = String(cFormat: "%.2f", Double(framesRead) / Double(sampleRate))
        return "\(displayPath): truncated: \(what); results cover only the first \(seconds) s"
    }

    /// ``finishRead(_:)`` for an MP3: a decoding error, no frames at all, and at the end ``truncationWarning``.
    private func finishMP3Read(_ got: Int, stream: MP3Stream) throws(EarshotError) -> Int {
        if let text = stream.failure {
            isAtEnd = true
            throw EarshotError(.data, "\(displayPath): decoding failed after \(framesRead) frames (libmpg123: \(text); the file is damaged)", cause: text)
        }
        guard got == 0 else { return got }
        isAtEnd = true
        if framesRead == 0 {
            throw EarshotError(.data, "\(displayPath): no audio frames (the file holds a header but no samples)")
        }
        let decoded = String(cFormat: "%.2f", Double(framesRead) / Double(sampleRate))
        if mp3LengthIsStated, let declared = declaredFrameCount, declared - framesRead > Self.mpegFrameSamples {
            let stated = String(cFormat: "%.2f", Double(declared) / Double(sampleRate))
            truncationWarning = "\(displayPath): truncated: the MP3 ends early (decoded \(decoded) of \(stated) s); the analysis covers what was decoded"
        } else if stream.endsInsideFrame() {
            truncationWarning = "\(displayPath): truncated: the MP3 ends inside an audio frame after \(decoded) s; the analysis covers what was decoded"
        }
        return 0
    }

    /// Whether the file is MP3, for libmpg123: it starts with an MPEG audio frame sync (11 set bits, libsndfile's
    /// own test for MPEG audio), or with an ID3v2 tag followed by anything but the start of another container
    /// (`fLaC`, `RIFF`, `RF64`, `BW64`, `OggS`, `FORM`: tagged FLAC and friends stay with libsndfile). The
    /// corresponding C function is `pread`.
    package static func isMP3(leading: [UInt8], descriptor: Int32) -> Bool {
        if let tagLength = MPEGAudioHeader.id3v2Length(leading) {
            let next = MP3Stream.bytes(of: descriptor, at: Int64(tagLength), count: 4)
            let marker = String(decoding: next, as: UTF8.self)
            return !["fLaC", "RIFF", "RF64", "BW64", "OggS", "FORM"].contains(marker)
        }
        if leading.starts(with: [0x49, 0x44, 0x33]) { return true }  // "ID3" cut inside its 10-byte header
        return leading.count >= 2 && leading[0] == 0xFF && leading[1] & 0xE0 == 0xE0
    }

    /// Whether libsndfile has consumed the whole file, so that a decoding error is the file ending mid-stream
    /// (truncation) rather than damage inside it. The corresponding C functions are `lseek` and `fstat`.
    private func decoderReachedEndOfFile() -> Bool {
        var status = stat()
        let position = patchedIO.map { off_t($0.position) } ?? lseek(fileDescriptor, 0, SEEK_CUR)
        guard position >= 0, fstat(fileDescriptor, &status) == 0 else { return false }
        return position >= status.st_size
    }

    /// Samples per MPEG-1 Layer III frame: the shortfall tolerated before ``truncationWarning`` (an encoder may
    /// count the last, partly filled frame differently).
    package static let mpegFrameSamples: Int64 = 1152

    /// The first 16 KiB of the file (fewer when it is shorter; empty on a read error), read without moving the
    /// offset libsndfile reads from. The corresponding C function is `pread`.
    private static func leadingBytes(of descriptor: Int32) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 16_384)
        var count = 0
        while count < bytes.count {
            let got = bytes.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress! + count, buffer.count - count, off_t(count))
            }
            if got < 0 && errno == EINTR { continue }
            guard got > 0 else { break }
            count += got
        }
        return Array(bytes.prefix(count))
    }

    /// Whether an MP3's first frame is a Xing/Info header with a frame count or a VBRI header: then libmpg123's
    /// length is the encoder's count, not an estimate from the file size. `bytes` is the start of the file; an
    /// ID3v2 tag (10-byte header, syncsafe size, optional 10-byte footer) is skipped. The Xing tag sits after the
    /// side information (4 + 9 to 32 bytes into the frame, by MPEG version and channel mode); VBRI 36 bytes in.
    package static func statesMP3Length(_ bytes: [UInt8]) -> Bool {
        var start = 0
        if bytes.count >= 10, bytes[0] == 0x49, bytes[1] == 0x44, bytes[2] == 0x33 {  // "ID3"
            let size = bytes[6...9].reduce(0) { $0 << 7 | Int($1 & 0x7F) }
            start = 10 + size + (bytes[5] & 0x10 != 0 ? 10 : 0)
        }
        // The first frame sync (11 set bits), a little past the tag at most.
        guard let sync = (start..<max(start, min(bytes.count - 1, start + 4096))).first(where: {
            bytes[$0] == 0xFF && bytes[$0 + 1] & 0xE0 == 0xE0
        }) else { return false }
        func tag(at offset: Int) -> String? {
            guard offset + 8 <= bytes.count else { return nil }
            return String(decoding: bytes[offset..<offset + 4], as: UTF8.self)
        }
        for offset in [13, 21, 36] {  // 4 + side information: 9 (MPEG-2 mono), 17 (MPEG-1 mono, MPEG-2 stereo), 32
            let position = sync + offset
            guard let name = tag(at: position), name == "Xing" || name == "Info" else { continue }
            return bytes[position + 7] & 0x01 != 0  // the frames field is present
        }
        return tag(at: sync + 36) == "VBRI"
    }

    /// libsndfile's header log (what it parsed, with its complaints). The corresponding C function is
    /// `sf_command(SFC_GET_LOG_INFO)`.
    private static func logInfo(of handle: OpaquePointer) -> String {
        var buffer = [CChar](repeating: 0, count: 16_384)
        let count = buffer.count
        _ = buffer.withUnsafeMutableBufferPointer { pointer in
            sf_command(handle, Int32(SFC_GET_LOG_INFO), pointer.baseAddress, Int32(count))
        }
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Finds a data chunk shorter than its header says, from libsndfile's log lines such as
    /// `data : 137090 (should be 59956)` (WAV/RF64) or `SSND : ... (should be ...)` (AIFF). The header sizes
    /// 0xFFFFFFFF and >= 0x7FFF0000 are the placeholders streaming writers leave, not truncation.
    package static func shortDataChunk(log: String) -> (declared: Int64, present: Int64)? {
        for line in log.split(separator: "\n") {
            let trimmedLine = line.trimmingSpaces()
            guard trimmedLine.hasPrefix("data") || trimmedLine.hasPrefix("SSND"),
                  let colon = trimmedLine.firstIndex(of: ":"),
                  let open = trimmedLine.firstRange(of: "(should be ") else { continue }
            let declaredText = trimmedLine[trimmedLine.index(after: colon)..<open.lowerBound]
                .trimmingSpaces()
            let presentText = trimmedLine[open.upperBound...].prefix { $0.isNumber }
            guard let declared = Int64(declaredText), let present = Int64(presentText) else { continue }
            if present < declared && declared < 0x7FFF_0000 {
                return (declared, present)
            }
        }
        return nil
    }

    /// The frames a WAV or AIFF whose data chunk was cut short (`declaredBytes` declared, `presentBytes` there)
    /// promises: the count its header states (AIFF's `COMM` chunk, a WAV's `fact` chunk, logged by libsndfile as
    /// `Frames : 510495` or `frames : 510495`), else, for PCM, the declared bytes over the bytes per frame (the
    /// bytes there over the `frames` libsndfile found in them). Nil when nothing was found to decode (`frames` 0).
    package static func promisedFrameCount(declaredBytes: Int64, presentBytes: Int64, frames: Int64, log: String) -> Int64? {
        guard frames > 0 else { return nil }
        for line in log.split(separator: "\n") {
            let words = line.trimmingSpaces()
            guard words.lowercased().hasPrefix("frames") else { continue }
            let rest = words.dropFirst("frames".count).trimmingSpaces()
            if rest.hasPrefix(":"), let stated = Int64(rest.dropFirst().trimmingSpaces()), stated > frames { return stated }
        }
        let bytesPerFrame = presentBytes / frames
        return bytesPerFrame > 0 ? max(frames, declaredBytes / bytesPerFrame) : nil
    }

    /// libsndfile's name of a major format or subtype, e.g. `FLAC (Free Lossless Audio Codec)`.
    private static func formatName(_ format: Int) -> String {
        var info = SF_FORMAT_INFO()
        info.format = Int32(format)
        let size = Int32(MemoryLayout<SF_FORMAT_INFO>.size)
        guard sf_command(nil, Int32(SFC_GET_FORMAT_INFO), &info, size) == 0, let name = info.name else {
            return String(cFormat: "format 0x%x", format)
        }
        return String(cString: name)
    }

    /// A libsndfile message without its `Error : ` prefix and trailing period, to sit inside parentheses.
    private static func trimmed(_ text: String) -> String {
        var result = text.trimmingWhitespace()
        if result.hasPrefix("Error : ") { result.removeFirst("Error : ".count) }
        while result.hasSuffix(".") { result.removeLast() }
        return result
    }
}
