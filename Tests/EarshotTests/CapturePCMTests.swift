import Dispatch
import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// PCMCapture against real ALSA PCMs (the `file` plugin with an `infile`; see ``CaptureFixtures``).
@Suite("PCMCapture", .timeLimit(.minutes(1)))
struct CapturePCMTests {
    private let queue = DispatchQueue(label: "capture-tests")

    /// Opens `device` defined by `alsa`, captures into a ring of `ringCapacity`, returns the capture and the ring.
    private func startCapture(
        _ configuration: CaptureConfiguration, ringCapacity: Int = 1 << 19, ends: CaptureRecorder<CaptureEnd>? = nil
    ) throws -> (PCMCapture, SampleRingBuffer) {
        let capture = try PCMCapture(configuration: configuration)
        let ring = SampleRingBuffer(minimumCapacity: ringCapacity)
        try capture.start(into: ring, queue: queue) { ends?.append($0) }
        return (capture, ring)
    }

    @Test(.needsShared) func theRealRecordingArrivesSampleForSampleThroughTheFilePlugin() throws {
        let mono = try #require(CaptureFixtures.alarmClockMono)
        let path = CaptureFixtures.writeRaw(CaptureFixtures.bytes(of: mono), name: "alarm-mono.raw")
        let configuration = CaptureConfiguration(
            device: "earshot_alarm_mono", sampleRate: CaptureFixtures.alarmClockRate,
            alsaConfiguration: CaptureFixtures.filePCM("earshot_alarm_mono", infile: path))
        let (capture, ring) = try startCapture(configuration)
        defer { capture.stop() }
        #expect(capture.format.sampleFormat == .s16LE)
        #expect(capture.format.channels == 1)
        #expect(capture.format.sampleRate == 48_000)
        #expect(capture.format.periodFrames == 9_600)  // 0.2 s at 48 kHz (CaptureConfiguration.defaultPeriodDuration)
        #expect(capture.format.bufferFrames == 76_800)  // 8 periods

        // The ring holds 2^19 samples, more than the 294128 of the recording, so nothing of it can be dropped.
        #expect(mono.count == 294_128)
        let (samples, chunks) = CaptureFixtures.read(ring, frames: mono.count)
        #expect(samples.count == mono.count)
        #expect(chunks.first?.framePosition == 0)
        #expect(chunks.allSatisfy { $0.gapFrames == 0 && $0.sampleRate == 48_000 })
        let expected = mono.map { Float($0) / 32_768 }
        #expect(samples == expected)
        #expect(capture.xrunCount == 0)
        #expect(capture.stop())
        #expect(!capture.isRunning)
        #expect(capture.framesCaptured >= 294_128)
    }

    /// Raw little-endian bytes for each format and the Float each value must convert to.
    static let formatCases: [(SampleFormat, [UInt8], [Float])] = [
        (.s16LE,
         [0x00, 0x80, 0x00, 0xC0, 0xFF, 0xFF, 0x00, 0x00, 0x01, 0x00, 0x00, 0x40, 0xFF, 0x7F],
         [-1, -0.5, -1.0 / 32_768, 0, 1.0 / 32_768, 0.5, 32_767.0 / 32_768]),
        (.s24_3LE,
         [0x00, 0x00, 0x80, 0x00, 0x00, 0xC0, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x40,
          0xFF, 0xFF, 0x7F],
         [-1, -0.5, -1.0 / 8_388_608, 0, 1.0 / 8_388_608, 0.5, 8_388_607.0 / 8_388_608]),
        // S24_LE: 24 bits in the low 3 bytes of each 32-bit word; the top byte (0xAB here) is padding and ignored.
        (.s24LE,
         [0x00, 0x00, 0x80, 0xAB, 0x00, 0x00, 0xC0, 0xAB, 0xFF, 0xFF, 0xFF, 0xAB, 0x00, 0x00, 0x00, 0xAB, 0x01, 0x00,
          0x00, 0xAB, 0x00, 0x00, 0x40, 0xAB, 0xFF, 0xFF, 0x7F, 0xAB],
         [-1, -0.5, -1.0 / 8_388_608, 0, 1.0 / 8_388_608, 0.5, 8_388_607.0 / 8_388_608]),
        // S32_LE: 2147483647 rounds to 2^31 in Float, so the largest code reads as exactly 1.0.
        (.s32LE,
         [0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00, 0xC0, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00,
          0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0xFF, 0xFF, 0xFF, 0x7F],
         [-1, -0.5, -1.0 / 2_147_483_648, 0, 1.0 / 2_147_483_648, 0.5, 1]),
        // FLOAT_LE passes through, including values beyond full scale.
        (.floatLE,
         [0x00, 0x00, 0x80, 0xBF, 0x00, 0x00, 0x00, 0xBF, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3E, 0x00, 0x00,
          0x80, 0x3F, 0x00, 0x00, 0xC0, 0x3F],
         [-1, -0.5, 0, 0.25, 1, 1.5]),
    ]

    @Test(arguments: formatCases)
    func eachFormatConvertsWithItsFullScaleThroughALSA(_ format: SampleFormat, _ bytes: [UInt8], _ expected: [Float])
        throws
    {
        let name = "earshot_format_\(format.rawValue.lowercased())"
        let path = CaptureFixtures.writeRaw(bytes, name: "\(name).raw")
        // The null plugin takes any format, so the format is chosen by allowing only this one.
        let configuration = CaptureConfiguration(
            device: name, formats: [format], alsaConfiguration: CaptureFixtures.filePCM(name, infile: path))
        let (capture, ring) = try startCapture(configuration)
        defer { capture.stop() }
        #expect(capture.format.sampleFormat == format)
        let (samples, _) = CaptureFixtures.read(ring, frames: expected.count)
        #expect(samples == expected)
    }

    @Test func aDeviceOfferingOnlyFloatNegotiatesFLOAT_LE() throws {
        let values: [Float] = [0.125, -0.75, 1, -1]
        let path = CaptureFixtures.writeRaw(
            values.flatMap { value in withUnsafeBytes(of: value.bitPattern.littleEndian) { Array($0) } },
            name: "float-only.raw")
        let configuration = CaptureConfiguration(
            device: "earshot_float_only",
            alsaConfiguration: CaptureFixtures.filePCM(
                "earshot_float_only", infile: path, slave: CaptureFixtures.floatOnlySlave))
        let (capture, ring) = try startCapture(configuration)
        defer { capture.stop() }
        #expect(capture.format.sampleFormat == .floatLE)
        #expect(capture.format.channels == 1)
        #expect(CaptureFixtures.read(ring, frames: 4).samples == values)
    }

    @Test func nonFiniteFloatSamplesFromADeviceArriveSanitized() throws {
        let values: [Float] = [.nan, .infinity, -.infinity, 1e30, -1e30, 1.5, -0.25]
        let path = CaptureFixtures.writeRaw(
            values.flatMap { value in withUnsafeBytes(of: value.bitPattern.littleEndian) { Array($0) } },
            name: "float-nonfinite.raw")
        let configuration = CaptureConfiguration(
            device: "earshot_float_nonfinite",
            alsaConfiguration: CaptureFixtures.filePCM(
                "earshot_float_nonfinite", infile: path, slave: CaptureFixtures.floatOnlySlave))
        let (capture, ring) = try startCapture(configuration)
        defer { capture.stop() }
        #expect(capture.format.sampleFormat == .floatLE)
        #expect(CaptureFixtures.read(ring, frames: values.count).samples == [0, 1000, -1000, 1000, -1000, 1.5, -0.25])
    }

    @Test(.needsShared) func aStereoOnlyDeviceIsReadWithTwoChannelsAndMixedToTheirMean() throws {
        let mono = try #require(CaptureFixtures.alarmClockMono)
        // The recording's own two channels are identical; pair each sample with the one 0.1 s later instead, so
        // the channels differ and the mix is a real mean.
        let frames = mono.count
        let stereo = (0..<frames).flatMap { [mono[$0], mono[($0 + 4_800) % frames]] }
        let path = CaptureFixtures.writeRaw(CaptureFixtures.bytes(of: stereo), name: "alarm-stereo.raw")
        let configuration = CaptureConfiguration(
            device: "earshot_stereo_only", sampleRate: 48_000,
            alsaConfiguration: CaptureFixtures.filePCM(
                "earshot_stereo_only", infile: path, slave: CaptureFixtures.stereoOnlySlave))
        let (capture, ring) = try startCapture(configuration)
        defer { capture.stop() }
        #expect(capture.format.channels == 2)
        #expect(capture.format.sampleFormat == .s16LE)
        let (samples, chunks) = CaptureFixtures.read(ring, frames: frames)
        #expect(samples.count == frames)
        #expect(chunks.allSatisfy { $0.gapFrames == 0 })
        var largestDifference: Float = 0
        var differingFromLeft = 0
        for frame in 0..<min(frames, samples.count) {
            let left = Float(stereo[2 * frame]) / 32_768
            let right = Float(stereo[2 * frame + 1]) / 32_768
            largestDifference = max(largestDifference, abs(samples[frame] - (left + right) / 2))
            if samples[frame] != left { differingFromLeft += 1 }
        }
        #expect(largestDifference <= 1e-7)
        #expect(differingFromLeft > 100_000)
    }

    @Test func aMissingCardNamesTheDeviceAndTheFix() {
        #expect {
            _ = try PCMCapture(configuration: CaptureConfiguration(device: "hw:99,0"))
        } throws: { error in
            guard let error = error as? EarshotError else { return false }
            return error.code == .unavailable && error.exitStatus == 69
                && error.message == "cannot open capture device \"hw:99,0\": No such file or directory (no such "
                    + "device; list devices with `earshot devices` or `arecord -L`)"
        }
        #expect {
            _ = try PCMCapture(configuration: CaptureConfiguration(device: "earshot_no_such_pcm"))
        } throws: { error in
            (error as? EarshotError)?.message == "cannot open capture device \"earshot_no_such_pcm\": No such file "
                + "or directory (no such device; list devices with `earshot devices` or `arecord -L`)"
        }
    }

    @Test func busyAndPermissionFailuresNameTheFix() {
        let busy = ALSAError(function: "snd_pcm_open", code: -EBUSY).openFailure(device: "hw:2,0")
        #expect(busy.message == "cannot open capture device \"hw:2,0\": Device or resource busy (another program is "
            + "recording; try a dsnoop device or stop the other program)")
        #expect(busy.cause == "snd_pcm_open: Device or resource busy")
        let permission = ALSAError(function: "snd_pcm_open", code: -EACCES).openFailure(device: "hw:0,0")
        #expect(permission.message == "cannot open capture device \"hw:0,0\": Permission denied (add the user to the "
            + "\"audio\" group)")
        #expect(ALSAError(function: "snd_pcm_open", code: -EPERM).kind == .permission)
        #expect(ALSAError(function: "snd_pcm_readi", code: -EPIPE).kind == .overrun)
        #expect(ALSAError(function: "snd_pcm_readi", code: -ESTRPIPE).kind == .suspended)
        #expect(ALSAError(function: "snd_pcm_open", code: -ENODEV).kind == .missing)
        #expect(ALSAError(function: "snd_pcm_open", code: -ENOENT).kind == .missing)
        let other = ALSAError(function: "snd_pcm_open", code: -ENOMEM)
        #expect(other.kind == .other && other.code == -ENOMEM)
        #expect(other.openFailure(device: "x").message == "cannot open capture device \"x\": Cannot allocate memory "
            + "(snd_pcm_open failed; check the device name and its ALSA configuration)")
    }

    /// trial 6 #10: `plughw:` was advised for plugin PCMs (`pulse`, `default`, a `dsnoop`), where it is wrong.
    @Test func aPluginPCMWithoutTheFormatsIsAdvisedAPlugOverItNotPlughw() throws {
        let values: [Float] = [0.125, -0.75, 0.5, -1]
        let path = CaptureFixtures.writeRaw(
            values.flatMap { value in withUnsafeBytes(of: value.bitPattern.littleEndian) { Array($0) } },
            name: "float-plugin.raw")
        let definition = CaptureFixtures.filePCM("earshot_float_plugin", infile: path, slave: CaptureFixtures.floatOnlySlave)
        #expect {
            _ = try PCMCapture(configuration: CaptureConfiguration(
                device: "earshot_float_plugin", formats: [.s16LE], alsaConfiguration: definition))
        } throws: { error in
            (error as? EarshotError)?.message == "capture device \"earshot_float_plugin\" offers none of the sample "
                + "formats S16_LE (use plug:earshot_float_plugin, which converts, or allow more formats)"
        }
        // The advice works: ALSA's plug PCM over it converts FLOAT_LE to S16_LE.
        let (capture, ring) = try startCapture(CaptureConfiguration(
            device: "plug:earshot_float_plugin", formats: [.s16LE], alsaConfiguration: definition))
        defer { capture.stop() }
        #expect(capture.format.sampleFormat == .s16LE)
        #expect(CaptureFixtures.read(ring, frames: 4).samples == values)
    }

    @Test func conversionIsAdvisedOnlyWhereItHelps() {
        #expect(PCMCapture.conversionAdvice(device: "hw:1,0") == "use plughw:1,0, which converts")
        #expect(PCMCapture.conversionAdvice(device: "hw:CARD=Mic,DEV=0") == "use plughw:CARD=Mic,DEV=0, which converts")
        #expect(PCMCapture.conversionAdvice(device: "dsnoop_mic") == "use plug:dsnoop_mic, which converts")
        #expect(PCMCapture.conversionAdvice(device: "dsnoop:CARD=1") == "define a plug PCM over it in the ALSA configuration, which converts")
        // A hw: device whose sample format cannot be set: plughw: converts it.
        let format = ALSAError(function: "snd_pcm_hw_params_set_format", code: -EINVAL)
        #expect(format.configureFailure(device: "hw:1,0").message == "cannot configure capture device \"hw:1,0\": "
            + "Invalid argument (snd_pcm_hw_params_set_format failed; use plughw:1,0, which converts)")
        // Not for a plugin PCM, and not for the rate: capture turns ALSA's resampling off, so plughw: would not help.
        #expect(format.configureFailure(device: "pulse").message == "cannot configure capture device \"pulse\": "
            + "Invalid argument (snd_pcm_hw_params_set_format failed; check the device and its ALSA configuration)")
        let rate = ALSAError(function: "snd_pcm_hw_params_set_rate_near", code: -EINVAL)
        #expect(rate.configureFailure(device: "hw:1,0").message == "cannot configure capture device \"hw:1,0\": "
            + "Invalid argument (snd_pcm_hw_params_set_rate_near failed; check the device and its ALSA configuration)")
        #expect(ALSAError(function: "snd_pcm_hw_params_set_format", code: -EBUSY).configureFailure(device: "default").message
            == "cannot open capture device \"default\": Device or resource busy (another program is recording; try a "
                + "dsnoop device or stop the other program)")
    }

    @Test func cardIndexesAreFoundInDeviceNames() {
        #expect(PCMCapture.cardIndex(in: "hw:99,0") == 99)
        #expect(PCMCapture.cardIndex(in: "plughw:1") == 1)
        #expect(PCMCapture.cardIndex(in: "hw:CARD=2,DEV=0") == 2)
        #expect(PCMCapture.cardIndex(in: "hw:CARD=PCH,DEV=0") == nil)
        #expect(PCMCapture.cardIndex(in: "default") == nil)
    }

    @Test func invalidSettingsAreConfigErrors() {
        #expect {
            _ = try PCMCapture(configuration: CaptureConfiguration(device: "null", sampleRate: 0))
        } throws: { error in
            (error as? EarshotError) == EarshotError(
                .config, "capture settings for \"null\": sample rate 0 Hz is out of range (use 8000-192000, e.g. 16000)")
        }
        #expect {
            _ = try PCMCapture(configuration: CaptureConfiguration(device: "null", formats: []))
        } throws: { error in
            (error as? EarshotError)?.message == "capture settings for \"null\": no sample format allowed (allow e.g. S16_LE)"
        }
    }

    @Test(.needsShared) func aFullRingBecomesAGapAtTheRightFramePosition() throws {
        let mono = try #require(CaptureFixtures.alarmClockMono)
        let path = CaptureFixtures.writeRaw(CaptureFixtures.bytes(of: mono), name: "alarm-mono-gap.raw")
        // Paced at twice real time, the 6.1 s recording lasts about 3 s; the 4096-sample ring fills in 43 ms.
        let configuration = CaptureConfiguration(
            device: "earshot_gap", sampleRate: 48_000, pacing: .clock(speed: 2),
            alsaConfiguration: CaptureFixtures.filePCM("earshot_gap", infile: path))
        let (capture, ring) = try startCapture(configuration, ringCapacity: 4_096)
        defer { capture.stop() }
        // Do not read until the producer has had to drop.
        #expect(CaptureFixtures.wait(timeout: 10) { ring.overrunCount > 0 })
        var chunks: [SampleRingBuffer.Chunk] = []
        var values: [[Float]] = []
        var buffer = [Float](repeating: 0, count: 8_192)
        _ = CaptureFixtures.wait(timeout: 10) {
            let chunk = buffer.withUnsafeMutableBufferPointer { ring.readChunk(into: $0) }
            if chunk.count > 0 {
                chunks.append(chunk)
                values.append(Array(buffer[0..<chunk.count]))
            }
            return chunks.contains { $0.gapFrames > 0 }
        }
        capture.stop()
        // The first 4096 samples are the recording's first 4096, contiguous from 0.
        let beforeGap = chunks.prefix { $0.gapFrames == 0 }
        #expect(beforeGap.first?.framePosition == 0)
        #expect(beforeGap.reduce(0) { $0 + $1.count } == 4_096)
        #expect(Array(values.prefix(beforeGap.count).joined()) == mono[0..<4_096].map { Float($0) / 32_768 })
        // Then a gap: the chunk after it starts where its frames were in the recording.
        let gapIndex = try #require(chunks.firstIndex { $0.gapFrames > 0 })
        let gap = chunks[gapIndex]
        #expect(gap.framePosition == 4_096 + gap.gapFrames)
        #expect(gap.isDiscontinuity)
        #expect(ring.droppedFrameCount >= gap.gapFrames)
        let start = Int(gap.framePosition)
        let expected: [Float] = (start..<start + gap.count).map { $0 < mono.count ? Float(mono[$0]) / 32_768 : 0 }
        #expect(values[gapIndex] == expected)
    }

    @Test func clockPacingNeverRunsAheadOfRealTime() throws {
        let path = CaptureFixtures.writeRaw([UInt8](repeating: 0, count: 64), name: "silence.raw")
        let configuration = CaptureConfiguration(
            device: "earshot_paced", pacing: .clock(speed: 8),
            alsaConfiguration: CaptureFixtures.filePCM("earshot_paced", infile: path))
        let started = Date()
        let (capture, ring) = try startCapture(configuration)
        defer { capture.stop() }
        // 16000 frames are one second of audio: at 8 times real time they cannot arrive in less than 1/8 s, less
        // the first period (0.2 s of audio), written before any wait.
        let (samples, chunks) = CaptureFixtures.read(ring, frames: 16_000)
        let elapsed = Date().timeIntervalSince(started)
        #expect(samples.count == 16_000)
        #expect(chunks.allSatisfy { $0.gapFrames == 0 })
        #expect(elapsed >= (1 - CaptureConfiguration.defaultPeriodDuration) / 8 - 0.01, "\(elapsed) s")
    }

    @Test func stopEndsTheThreadAndReportsStopped() throws {
        let path = CaptureFixtures.writeRaw([UInt8](repeating: 0, count: 64), name: "stop.raw")
        let ends = CaptureRecorder<CaptureEnd>()
        let configuration = CaptureConfiguration(
            device: "earshot_stop", pacing: .realTime,
            alsaConfiguration: CaptureFixtures.filePCM("earshot_stop", infile: path))
        let (capture, _) = try startCapture(configuration, ends: ends)
        #expect(capture.isRunning)
        #expect(throws: EarshotError.self) {
            try capture.start(into: SampleRingBuffer(minimumCapacity: 16), queue: queue) { _ in }
        }
        #expect(capture.end == nil)
        #expect(capture.stop(timeout: 2))
        #expect(!capture.isRunning)
        #expect(capture.end == .stopped)
        #expect(CaptureFixtures.wait(timeout: 2) { ends.values == [.stopped] })
        #expect(capture.stop(timeout: 2))  // idempotent
    }

    /// A stop that comes before the start (the supervisor stopped between publishing a reopened source and
    /// starting it, audit 12 #3) wins: the start throws, no thread runs and nothing reaches the ring. Before, that
    /// stop returned without asking anything and the start ran a thread no one stopped.
    @Test func aStopBeforeTheStartMakesTheStartRefuse() throws {
        let path = CaptureFixtures.writeRaw([UInt8](repeating: 0, count: 64), name: "stop-first.raw")
        let capture = try PCMCapture(configuration: CaptureConfiguration(
            device: "earshot_stop_first", pacing: .realTime,
            alsaConfiguration: CaptureFixtures.filePCM("earshot_stop_first", infile: path)))
        #expect(capture.stop(timeout: 2))
        let ring = SampleRingBuffer(minimumCapacity: 1 << 16)
        #expect {
            try capture.start(into: ring, queue: queue) { _ in }
        } throws: { error in
            (error as? EarshotError) == EarshotError(
                .system, "capture from \"earshot_stop_first\" was stopped before it started (create a new source to capture)")
        }
        #expect(!capture.isRunning)
        #expect(capture.end == nil)
        #expect(capture.framesCaptured == 0)
        #expect(ring.availableToRead == 0)
        #expect(capture.stop(timeout: 2))  // still idempotent
    }

    @Test func ioErrorsAreRecoveredAsGapsUntilTheyKeepComing() throws {
        // The file plugin writes what it captures to `file`; with /dev/full that write fails, and alsa-lib answers
        // every 9th read of a 320-frame period with -EIO. Each is recovered (a gap) until 5 come within 2 s, which
        // ends the capture as a failing device.
        let path = CaptureFixtures.writeRaw([UInt8](repeating: 0, count: 64), name: "eio.raw")
        let ends = CaptureRecorder<CaptureEnd>()
        let configuration = CaptureConfiguration(
            device: "earshot_eio",
            alsaConfiguration: CaptureFixtures.filePCM("earshot_eio", infile: path, output: "/dev/full"))
        let (capture, ring) = try startCapture(configuration, ends: ends)
        defer { capture.stop() }
        #expect(CaptureFixtures.wait(timeout: 10) { !ends.values.isEmpty })
        guard case .failed(let error) = ends.values.first else {
            Issue.record("expected a failure, got \(ends.values)")
            return
        }
        #expect(error.message == "capture device \"earshot_eio\" stopped: Input/output error (the device was "
            + "unplugged or failed; check it with `earshot devices`)")
        #expect(error.code == .unavailable)
        #expect(capture.end == .failed(error))
        #expect(error.cause?.hasPrefix("snd_pcm_readi: Input/output error (ALSA: ") == true)
        #expect(!capture.isRunning)
        #expect(capture.xrunCount >= 4)
        let (samples, chunks) = CaptureFixtures.read(ring, frames: ring.availableToRead, timeout: 1)
        #expect(Int64(samples.count) == capture.framesCaptured)
        #expect(chunks.filter { $0.gapFrames > 0 }.count == capture.xrunCount)
        #expect(chunks.last.map { $0.framePosition + Int64($0.count) } == capture.nextFramePosition)
    }

    @Test func theNullPCMIsListedAsACaptureDevice() throws {
        let pcms = try CaptureDevice.capturePCMs()
        #expect(pcms.contains(CaptureDevice(
            name: "null", description: "Discard all samples (playback) or generate zero samples (capture)")))
    }

    @Test func theDeviceReportListsPCMsAndCardCaptureDevices() {
        let text = CaptureDeviceReport.text(
            pcms: [
                CaptureDevice(name: "default", description: "Default ALSA Output"),
                CaptureDevice(name: "sysdefault:CARD=PCH", description: "HDA Intel PCH, ALC892 Analog\nDefault Audio Device"),
            ],
            cards: [
                SoundCard(index: 0, id: "PCH", name: "HDA Intel PCH", captureDevices: [.init(index: 0, name: "ALC892 Analog")]),
                SoundCard(index: 1, id: "HDMI", name: "HDA Intel HDMI", captureDevices: []),
            ])
        #expect(text == """
            Capture PCMs (pass a name to earshotd --device):
              default
                  Default ALSA Output
              sysdefault:CARD=PCH
                  HDA Intel PCH, ALC892 Analog
                  Default Audio Device

            Sound cards with capture devices:
              hw:0,0  HDA Intel PCH [PCH]: ALC892 Analog

            """)
        #expect(CaptureDeviceReport.text(pcms: [], cards: []) == """
            Capture PCMs (pass a name to earshotd --device):
              (none)

            Sound cards: none found (no audio hardware is visible to this user; see /proc/asound/cards)

            """)
    }
}
