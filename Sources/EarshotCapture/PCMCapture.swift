internal import CALSA
import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio

/// Settings for opening an ALSA capture device. Every field has a working default.
public struct CaptureConfiguration: Sendable, Equatable {
    /// The ALSA PCM name: `default`, `hw:1,0`, `plughw:CARD=Mic,DEV=0`, a `dsnoop` PCM, `pulse`, or a PCM defined
    /// in ``alsaConfiguration``.
    public var device: String
    /// The preferred sample rate in Hz. Default 16000, the classifier's rate (YAMNet takes 16 kHz), so no
    /// resampling is needed when the device offers it. See ``PCMCapture`` for the fallback order.
    public var sampleRate: Int
    /// Sample formats to accept, most preferred first. Default ``SampleFormat/preferenceOrder``.
    public var formats: [SampleFormat]
    /// Channels to record, or nil to take 1 when offered, else the fewest the device allows (mixed to mono).
    public var channels: Int?
    /// Target period (frames per read) in seconds; ALSA picks the nearest it allows. Default
    /// ``defaultPeriodDuration``.
    public var periodDuration: Double
    /// 0.2 s (3200 frames at 16 kHz): five wake-ups a second (of the capture thread, then of the analysis queue).
    /// The classifier's hop is 0.48 s and the alarm pattern detector needs no sooner answer, while each wake-up
    /// costs the core time in the kernel (more in a virtual machine); measured with bench --daemon on the 2-core VM:
    /// 20 ms periods, capture thread alone 0.26 % of a core; 0.1 s, whole daemon gated 0.20-0.22 % (capture
    /// thread and analysis queue about 0.1 % each, mostly wake-ups); 0.2 s, see README, Performance.
    public static let defaultPeriodDuration = 0.2
    /// Periods in the device buffer. Default 8 (1.6 s at 0.2 s periods): the capture thread may be descheduled
    /// that long before an overrun.
    public var periodsPerBuffer: Int
    /// How the capture thread keeps time. Default ``CapturePacing/device`` (the device's clock). Use
    /// ``CapturePacing/clock(speed:)`` for PCMs without a clock (`null`, or the `file` plugin over `null`), which
    /// otherwise deliver frames as fast as they are read.
    public var pacing: CapturePacing
    /// ALSA configuration text loaded on top of the system configuration before opening (e.g. a `pcm.NAME { type
    /// file ... }` definition), or nil for the system configuration alone.
    public var alsaConfiguration: String?

    public init(
        device: String = "default", sampleRate: Int = 16_000, formats: [SampleFormat] = SampleFormat.preferenceOrder,
        channels: Int? = nil, periodDuration: Double = defaultPeriodDuration, periodsPerBuffer: Int = 8,
        pacing: CapturePacing = .device, alsaConfiguration: String? = nil
    ) {
        self.device = device
        self.sampleRate = sampleRate
        self.formats = formats
        self.channels = channels
        self.periodDuration = periodDuration
        self.periodsPerBuffer = periodsPerBuffer
        self.pacing = pacing
        self.alsaConfiguration = alsaConfiguration
    }
}

/// Live capture from an ALSA PCM on a dedicated thread, into a ``SampleRingBuffer``.
///
/// `init` opens the PCM (non-blocking, so a busy device fails at once instead of waiting) and negotiates:
/// - access: interleaved read/write (`snd_pcm_readi`);
/// - format: the first of ``CaptureConfiguration/formats`` the device offers (default S16_LE, S24_3LE, S24_LE,
///   S32_LE, FLOAT_LE);
/// - channels: ``CaptureConfiguration/channels`` if set, else 1 if offered, else the device's minimum; the
///   channels are averaged to mono;
/// - rate: ALSA's own resampling is turned off (the analysis resamples with soxr, which is far better than ALSA's
///   linear converter); then the preferred rate (16000 Hz) if offered, else the first of 16000, 22050, 32000,
///   44100, 48000 the device offers (rates at or above the preferred one keep the band the classifier uses), else
///   the rate nearest the preferred one (`snd_pcm_hw_params_set_rate_near`);
/// - period: nearest to ``CaptureConfiguration/periodDuration``; buffer: nearest to `periodsPerBuffer` periods.
///
/// The capture thread waits for a period (`snd_pcm_wait`, 250 ms timeout so stop requests are seen), reads it with
/// `snd_pcm_readi` into a preallocated buffer, converts it to mono Float and writes it to the ring at its frame
/// position. It does not allocate, lock or log. An overrun (`-EPIPE`) or suspend (`-ESTRPIPE`) is recovered with
/// `snd_pcm_recover` and counted in ``xrunCount``; the frames lost (those left in the buffer at the last read plus
/// the monotonic clock's time since then, in frames) advance the frame position, so the ring's consumer sees a gap there. Other errors (`-EIO`, `-EBADFD`) are
/// recovered the same way (`snd_pcm_prepare`, counted, a gap) unless 5 come within 2 s. `-ENODEV` (unplugged),
/// errors that keep coming, or a failed recovery end the thread with ``CaptureEnd/failed(_:)``.
///
/// - Important: Create, start and stop from any thread; the counters are readable from any thread. Call
///   ``stop(timeout:)`` before dropping the last reference (deinit stops the thread too, waiting up to 1 s).
public final class PCMCapture: CaptureSource {
    public let name: String
    public let format: CaptureFormat
    private let loop: ProducerLoop

    /// Opens `configuration.device` for capture and negotiates its parameters (see the type's description).
    ///
    /// - Throws: ``EarshotError`` `.unavailable` (exit 69) with one line naming the device and the fix:
    ///   busy (`-EBUSY`), missing (`-ENOENT`, `-ENODEV`, or a card index that does not exist), no permission
    ///   (`-EACCES`, `-EPERM`), no acceptable format, channel count or rate, or any other failed ALSA call
    ///   (the function and ALSA's message are in `cause`). `.config` (exit 78) for invalid configuration values.
    ///   The corresponding C functions are `snd_pcm_open` (or `snd_pcm_open_lconf`) and `snd_pcm_hw_params_*`.
    public init(configuration: CaptureConfiguration) throws {
        try Self.validate(configuration)
        let device = configuration.device
        let (outcome, message) = ALSADiagnostics.capturing { () -> Result<(PCMHandle, CaptureFormat), EarshotError> in
            do {
                let handle = try Self.open(device: device, configurationText: configuration.alsaConfiguration)
                let format = try Self.negotiate(handle.pointer, configuration: configuration)
                return .success((handle, format))
            } catch let error as EarshotError {
                return .failure(error)
            } catch let error as ALSAError {
                return .failure(error.configureFailure(device: device))
            } catch {
                return .failure(EarshotError(.unavailable, "cannot open capture device \"\(device)\": \(error)"))
            }
        }
        switch outcome {
        case .success(let (handle, format)):
            name = device
            self.format = format
            let reader = PCMReader(handle: handle, device: device, format: format)
            loop = ProducerLoop(
                reader: reader, sampleRate: format.sampleRate, chunkFrames: format.periodFrames,
                pacing: configuration.pacing)
        case .failure(var error):
            if let message, error.cause?.contains("ALSA:") != true {
                error.cause = (error.cause.map { "\($0); " } ?? "") + "ALSA: \(message)"
            }
            throw error
        }
    }

    deinit { loop.stop(timeout: 1) }

    public var framesCaptured: Int64 { loop.framesCaptured }
    public var xrunCount: Int { loop.xrunCount }
    public var isRunning: Bool { loop.isRunning }
    public var nextFramePosition: Int64 { loop.nextFramePosition }
    public var end: CaptureEnd? { loop.end }
    public var secondsWithoutInput: Double { loop.secondsWithoutInput }

    public func start(
        into ring: SampleRingBuffer, startingAt framePosition: Int64 = 0, queue: DispatchQueue,
        onEnd: @escaping @Sendable (CaptureEnd) -> Void
    ) throws {
        try loop.start(into: ring, startingAt: framePosition, name: name, queue: queue, onEnd: onEnd)
    }

    @discardableResult
    public func stop(timeout: Double = 2) -> Bool { loop.stop(timeout: timeout) }

    // MARK: Opening

    private static func validate(_ configuration: CaptureConfiguration) throws {
        func bad(_ what: String) -> EarshotError {
            EarshotError(.config, "capture settings for \"\(configuration.device)\": \(what)")
        }
        guard !configuration.device.isEmpty else { throw bad("the device name is empty (use e.g. default or hw:1,0)") }
        guard (8_000...192_000).contains(configuration.sampleRate) else {
            throw bad("sample rate \(configuration.sampleRate) Hz is out of range (use 8000-192000, e.g. 16000)")
        }
        guard !configuration.formats.isEmpty else { throw bad("no sample format allowed (allow e.g. S16_LE)") }
        if let channels = configuration.channels, !(1...64).contains(channels) {
            throw bad("\(channels) channels is out of range (use 1-64)")
        }
        guard (0.001...0.5).contains(configuration.periodDuration) else {
            throw bad("period \(configuration.periodDuration) s is out of range (use 0.001-0.5, e.g. 0.02)")
        }
        guard (2...64).contains(configuration.periodsPerBuffer) else {
            throw bad("\(configuration.periodsPerBuffer) periods per buffer is out of range (use 2-64)")
        }
        if case .clock(let speed) = configuration.pacing, !(speed > 0 && speed.isFinite) {
            throw bad("pacing speed \(speed) must be a positive number")
        }
    }

    /// Opens the PCM for non-blocking capture, loading `configurationText` over the system configuration if given.
    private static func open(device: String, configurationText: String?) throws -> PCMHandle {
        var pcm: OpaquePointer?
        let mode = Int32(SND_PCM_NONBLOCK)
        if let configurationText {
            var top: OpaquePointer?
            try check(snd_config_update_ref(&top), "snd_config_update_ref", device: device)
            defer { snd_config_unref(top) }  // returns nothing
            var local: OpaquePointer?
            try check(snd_config_copy(&local, top), "snd_config_copy", device: device)
            defer { _ = snd_config_delete(local) }  // only fails for a node still attached to a parent
            var input: OpaquePointer?
            try check(
                snd_input_buffer_open(&input, configurationText, configurationText.utf8.count),
                "snd_input_buffer_open", device: device)
            defer { _ = snd_input_close(input) }  // frees the buffer input; cannot fail for a buffer
            let loaded = snd_config_load(local, input)
            guard loaded >= 0 else {
                let error = ALSAError(function: "snd_config_load", code: loaded)
                throw EarshotError(
                    .config, "cannot read the ALSA configuration for capture device \"\(device)\": \(error.text) "
                        + "(check its syntax, e.g. with `arecord -D NAME` and the same text in ~/.asoundrc)",
                    cause: error.description)
            }
            _ = JACKMessages.prepare(device: device, configuration: local)
            let (status, jack) = JACKMessages.capturing { snd_pcm_open_lconf(&pcm, device, SND_PCM_STREAM_CAPTURE, mode, local) }
            guard status >= 0 else { throw openError(status, "snd_pcm_open_lconf", device: device, jack: jack) }
        } else {
            var top: OpaquePointer?
            if snd_config_update_ref(&top) >= 0 {
                _ = JACKMessages.prepare(device: device, configuration: top)
                snd_config_unref(top)
            }
            let (status, jack) = JACKMessages.capturing { snd_pcm_open(&pcm, device, SND_PCM_STREAM_CAPTURE, mode) }
            guard status >= 0 else { throw openError(status, "snd_pcm_open", device: device, jack: jack) }
        }
        guard let pcm else {
            throw EarshotError(.unavailable, "cannot open capture device \"\(device)\": ALSA returned no handle")
        }
        return PCMHandle(pcm)
    }

    /// `jack`: libjack's messages during the open (``JACKMessages``), which say why a `jack` PCM failed.
    private static func openError(_ status: Int32, _ function: String, device: String, jack: String?) -> EarshotError {
        var error = ALSAError(function: function, code: status)
        if let failure = JACKMessages.openFailure(device: device, messages: jack, error: error) { return failure }
        if error.kind == .invalidArgument, let card = cardIndex(in: device), snd_card_load(card) == 0 {
            error.kind = .missing  // alsa-lib answers -EINVAL for a card index it cannot use (e.g. hw:99,0)
        }
        return error.openFailure(device: device)
    }

    /// The card number in names like `hw:1`, `hw:1,0`, `plughw:CARD=2,DEV=0`; nil for names without one.
    package static func cardIndex(in device: String) -> Int32? {
        guard let colon = device.firstIndex(of: ":") else { return nil }
        var arguments = device[device.index(after: colon)...]
        if arguments.hasPrefix("CARD=") { arguments = arguments.dropFirst(5) }
        let digits = arguments.prefix(while: \.isNumber)
        guard !digits.isEmpty, digits.count <= 6 else { return nil }
        return Int32(digits)
    }

    /// How to get a device that converts sample formats and channels: `use plughw:1,0, which converts` for a
    /// `hw:` device (the kernel driver takes only what the hardware does); `use plug:NAME, which converts` for a
    /// plugin PCM with a plain name (`default`, `pulse`, a `dsnoop` PCM defined in .asoundrc); for other plugin
    /// names, a `plug` PCM over it in the ALSA configuration. Not for the rate: capture turns ALSA's resampling off
    /// (`snd_pcm_hw_params_set_rate_resample`), so no plug PCM changes it.
    package static func conversionAdvice(device: String) -> String {
        if device == "hw" || device.hasPrefix("hw:") { return "use plug\(device), which converts" }
        if !device.isEmpty, !device.contains(where: { ":'\"{} ".contains($0) }) { return "use plug:\(device), which converts" }
        return "define a plug PCM over it in the ALSA configuration, which converts"
    }

    private static func check(_ status: Int32, _ function: String, device: String) throws {
        guard status >= 0 else { throw ALSAError(function: function, code: status) }
    }

    /// Negotiates hardware and software parameters and installs them; returns what was chosen.
    private static func negotiate(_ pcm: OpaquePointer, configuration: CaptureConfiguration) throws -> CaptureFormat {
        let device = configuration.device
        var params: OpaquePointer?
        try check(snd_pcm_hw_params_malloc(&params), "snd_pcm_hw_params_malloc", device: device)
        defer { snd_pcm_hw_params_free(params) }
        try check(snd_pcm_hw_params_any(pcm, params), "snd_pcm_hw_params_any", device: device)
        try check(
            snd_pcm_hw_params_set_access(pcm, params, SND_PCM_ACCESS_RW_INTERLEAVED), "snd_pcm_hw_params_set_access",
            device: device)

        guard let format = configuration.formats.first(where: {
            snd_pcm_hw_params_test_format(pcm, params, $0.alsaFormat) == 0
        }) else {
            let names = configuration.formats.map(\.rawValue).joined(separator: ", ")
            throw EarshotError(
                .unavailable,
                "capture device \"\(device)\" offers none of the sample formats \(names) "
                    + "(\(conversionAdvice(device: device)), or allow more formats)")
        }
        try check(snd_pcm_hw_params_set_format(pcm, params, format.alsaFormat), "snd_pcm_hw_params_set_format", device: device)

        var minimumChannels: UInt32 = 0
        var maximumChannels: UInt32 = 0
        try check(snd_pcm_hw_params_get_channels_min(params, &minimumChannels), "snd_pcm_hw_params_get_channels_min", device: device)
        try check(snd_pcm_hw_params_get_channels_max(params, &maximumChannels), "snd_pcm_hw_params_get_channels_max", device: device)
        let channels: UInt32
        if let wanted = configuration.channels {
            guard snd_pcm_hw_params_test_channels(pcm, params, UInt32(wanted)) == 0 else {
                throw EarshotError(
                    .unavailable,
                    "capture device \"\(device)\" cannot record \(wanted) channel\(wanted == 1 ? "" : "s") "
                        + "(it offers \(minimumChannels)-\(min(maximumChannels, 64)); change the channels setting)")
            }
            channels = UInt32(wanted)
        } else {
            channels = snd_pcm_hw_params_test_channels(pcm, params, 1) == 0 ? 1 : minimumChannels
        }
        guard channels >= 1 && channels <= 64 else {
            throw EarshotError(
                .unavailable, "capture device \"\(device)\" needs \(channels) channels at least (earshot reads up to 64)")
        }
        try check(snd_pcm_hw_params_set_channels(pcm, params, channels), "snd_pcm_hw_params_set_channels", device: device)

        try check(snd_pcm_hw_params_set_rate_resample(pcm, params, 0), "snd_pcm_hw_params_set_rate_resample", device: device)
        let preferred = UInt32(configuration.sampleRate)
        let candidates = [preferred] + [16_000, 22_050, 32_000, 44_100, 48_000].filter { $0 != preferred }
        var rate: UInt32
        if let offered = candidates.first(where: { snd_pcm_hw_params_test_rate(pcm, params, $0, 0) == 0 }) {
            rate = offered
            try check(snd_pcm_hw_params_set_rate(pcm, params, rate, 0), "snd_pcm_hw_params_set_rate", device: device)
        } else {
            rate = preferred
            var direction: Int32 = 0
            try check(
                snd_pcm_hw_params_set_rate_near(pcm, params, &rate, &direction), "snd_pcm_hw_params_set_rate_near",
                device: device)
        }
        guard (4_000...768_000).contains(rate) else {
            throw EarshotError(.unavailable, "capture device \"\(device)\" offers no usable sample rate (got \(rate) Hz)")
        }

        var periodTime = UInt32(configuration.periodDuration * 1_000_000)
        var direction: Int32 = 0
        try check(
            snd_pcm_hw_params_set_period_time_near(pcm, params, &periodTime, &direction),
            "snd_pcm_hw_params_set_period_time_near", device: device)
        var periodFrames: snd_pcm_uframes_t = 0
        try check(snd_pcm_hw_params_get_period_size(params, &periodFrames, &direction), "snd_pcm_hw_params_get_period_size", device: device)
        var bufferFrames = periodFrames * snd_pcm_uframes_t(configuration.periodsPerBuffer)
        try check(
            snd_pcm_hw_params_set_buffer_size_near(pcm, params, &bufferFrames), "snd_pcm_hw_params_set_buffer_size_near",
            device: device)
        try check(snd_pcm_hw_params(pcm, params), "snd_pcm_hw_params", device: device)

        // Read back what is installed.
        var installedRate: UInt32 = 0
        try check(snd_pcm_hw_params_get_rate(params, &installedRate, &direction), "snd_pcm_hw_params_get_rate", device: device)
        try check(snd_pcm_hw_params_get_period_size(params, &periodFrames, &direction), "snd_pcm_hw_params_get_period_size", device: device)
        try check(snd_pcm_hw_params_get_buffer_size(params, &bufferFrames), "snd_pcm_hw_params_get_buffer_size", device: device)
        guard periodFrames > 0, periodFrames <= 1 << 20, bufferFrames >= periodFrames else {
            throw EarshotError(
                .unavailable,
                "capture device \"\(device)\" chose unusable buffer sizes (period \(periodFrames), buffer \(bufferFrames) frames)")
        }

        var software: OpaquePointer?
        try check(snd_pcm_sw_params_malloc(&software), "snd_pcm_sw_params_malloc", device: device)
        defer { snd_pcm_sw_params_free(software) }
        try check(snd_pcm_sw_params_current(pcm, software), "snd_pcm_sw_params_current", device: device)
        try check(snd_pcm_sw_params_set_avail_min(pcm, software, periodFrames), "snd_pcm_sw_params_set_avail_min", device: device)
        try check(snd_pcm_sw_params(pcm, software), "snd_pcm_sw_params", device: device)

        return CaptureFormat(
            sampleFormat: format, channels: Int(channels), sampleRate: Int(installedRate),
            periodFrames: Int(periodFrames), bufferFrames: Int(bufferFrames))
    }
}

extension ALSAError {
    /// The line for a failed call while configuring an opened device. A device that converts is suggested only
    /// where it helps: a `hw:` device whose access, sample format or channel count cannot be set (see
    /// ``PCMCapture/conversionAdvice(device:)``); plugin PCMs (`default`, `pulse`, `dsnoop`) and other calls get
    /// "check the device and its ALSA configuration".
    package func configureFailure(device: String) -> EarshotError {
        switch kind {
        case .busy, .missing, .permission: return openFailure(device: device)
        default:
            let converts = ["snd_pcm_hw_params_set_access", "snd_pcm_hw_params_set_format", "snd_pcm_hw_params_set_channels"]
            let advice = (device == "hw" || device.hasPrefix("hw:")) && converts.contains(function)
                ? PCMCapture.conversionAdvice(device: device) : "check the device and its ALSA configuration"
            return EarshotError(
                .unavailable, "cannot configure capture device \"\(device)\": \(text) (\(function) failed; \(advice))",
                cause: description)
        }
    }
}

/// Owns one `snd_pcm_t`; closes it in deinit.
package final class PCMHandle: @unchecked Sendable {
    package let pointer: OpaquePointer
    package init(_ pointer: OpaquePointer) { self.pointer = pointer }
    deinit { _ = snd_pcm_close(pointer) }  // nothing to do on failure: alsa-lib frees the handle either way
}

/// The capture thread's side of ``PCMCapture``: wait, read, convert, recover.
package final class PCMReader: SourceReader, @unchecked Sendable {
    private let handle: PCMHandle
    private let device: String
    private let format: CaptureFormat
    private let frameBytes: Int
    private let raw: UnsafeMutableRawPointer
    private let logBuffer: UnsafeMutablePointer<CChar>
    private var started = false
    private var lastReadNanoseconds: UInt64 = 0
    /// Frames that were already waiting in the device buffer after the last read (`snd_pcm_avail_update`).
    private var pendingAtLastRead: Int64 = 0
    private var errorWindowStart: UInt64 = 0
    private var errorsInWindow = 0

    /// Errors other than xruns (`-EIO`, `-EBADFD`, ...) within ``errorWindowNanoseconds`` after which the device
    /// counts as failed; fewer are recovered like an overrun.
    package static let maximumErrorsInWindow = 5
    package static let errorWindowNanoseconds: UInt64 = 2_000_000_000
    /// Milliseconds `snd_pcm_wait` may block; bounds how long a stop request waits.
    package static let waitMilliseconds: Int32 = 250

    package init(handle: PCMHandle, device: String, format: CaptureFormat) {
        self.handle = handle
        self.device = device
        self.format = format
        frameBytes = format.sampleFormat.bytesPerSample * format.channels
        raw = .allocate(byteCount: format.periodFrames * frameBytes, alignment: 16)
        raw.initializeMemory(as: UInt8.self, repeating: 0, count: format.periodFrames * frameBytes)
        logBuffer = .allocate(capacity: ALSADiagnostics.messageCapacity)
        logBuffer.initialize(repeating: 0, count: ALSADiagnostics.messageCapacity)
    }

    deinit {
        raw.deallocate()
        logBuffer.deallocate()
    }

    package func threadWillStart() { ALSADiagnostics.install(buffer: logBuffer) }
    package func threadDidEnd() { ALSADiagnostics.uninstall() }

    package func read(into destination: UnsafeMutablePointer<Float>, capacity: Int) -> SourceReadResult {
        let pcm = handle.pointer
        if !started {
            let status = snd_pcm_start(pcm)
            guard status >= 0 else { return .failure(SourceFailure(function: "snd_pcm_start", code: status)) }
            started = true
            lastReadNanoseconds = DaemonClock.bootNanoseconds()
        }
        let ready = snd_pcm_wait(pcm, Self.waitMilliseconds)
        if ready == 0 { return .idle }
        if ready < 0 { return recover(from: ready, in: "snd_pcm_wait") }
        let frames = min(capacity, format.periodFrames)
        // Zero first: plugins that deliver no data (null, a file plugin past its infile's end) then read as silence.
        raw.initializeMemory(as: UInt8.self, repeating: 0, count: frames * frameBytes)
        let count = snd_pcm_readi(pcm, raw, snd_pcm_uframes_t(frames))
        if count < 0 { return recover(from: Int32(truncatingIfNeeded: count), in: "snd_pcm_readi") }
        if count == 0 { return .idle }
        SampleConversion.convertToMono(
            raw, format: format.sampleFormat, channels: format.channels, frameCount: count, into: destination)
        lastReadNanoseconds = DaemonClock.bootNanoseconds()
        // What is still waiting is lost too if the next read comes too late. A negative answer (an xrun already)
        // counts as 0 here; the next wait or read reports it.
        let pending = snd_pcm_avail_update(pcm)
        pendingAtLastRead = pending > 0 ? Int64(pending) : 0
        return .frames(count)
    }

    /// Handles a negative code from `function`: retry, recover an xrun, or fail.
    private func recover(from code: Int32, in function: StaticString) -> SourceReadResult {
        let pcm = handle.pointer
        switch -code {
        case EAGAIN, EINTR:
            return .idle
        case EPIPE, ESTRPIPE:
            let status = snd_pcm_recover(pcm, code, 1)
            guard status >= 0 else { return .failure(SourceFailure(function: "snd_pcm_recover", code: status)) }
            if snd_pcm_state(pcm) == SND_PCM_STATE_PREPARED {
                let started = snd_pcm_start(pcm)
                guard started >= 0 else { return .failure(SourceFailure(function: "snd_pcm_start", code: started)) }
            }
            // Everything captured since the last read was discarded with the full buffer.
            return .lost(frames: lostFrames(now: DaemonClock.bootNanoseconds()))
        case ENODEV:
            return .failure(SourceFailure(function: function, code: code))
        default:
            // -EIO and the like: restart the stream, unless errors keep coming (a failing or vanishing device).
            let now = ProducerLoop.monotonicNanoseconds()
            if now &- errorWindowStart > Self.errorWindowNanoseconds {
                errorWindowStart = now
                errorsInWindow = 0
            }
            errorsInWindow += 1
            if errorsInWindow >= Self.maximumErrorsInWindow {
                return .failure(SourceFailure(function: function, code: code))
            }
            let prepared = snd_pcm_prepare(pcm)
            guard prepared >= 0 else { return .failure(SourceFailure(function: "snd_pcm_prepare", code: prepared)) }
            let started = snd_pcm_start(pcm)
            guard started >= 0 else { return .failure(SourceFailure(function: "snd_pcm_start", code: started)) }
            // Preparing discarded the buffer: a gap, like an overrun.
            return .lost(frames: lostFrames(now: DaemonClock.bootNanoseconds()))
        }
    }

    /// Frames a recovery discarded: those waiting in the buffer at the last read plus those the device captured
    /// (or would have, while stopped or while the machine was suspended) since, estimated from CLOCK_BOOTTIME.
    private func lostFrames(now: UInt64) -> Int64 {
        let elapsed = Int64(Double(now &- lastReadNanoseconds) * Double(format.sampleRate) / 1e9)
        let lost = pendingAtLastRead + elapsed
        lastReadNanoseconds = now
        pendingAtLastRead = 0
        return max(1, lost)
    }

    package func error(for failure: SourceFailure) -> EarshotError {
        let message = String(cString: logBuffer).trimmingWhitespace()
        let error = ALSAError(
            function: "\(failure.function)", code: failure.code, detail: message.isEmpty ? nil : message)
        return EarshotError(
            .unavailable,
            "capture device \"\(device)\" stopped: \(error.text) (the device was unplugged or failed; "
                + "check it with `earshot devices`)",
            cause: error.description)
    }
}
