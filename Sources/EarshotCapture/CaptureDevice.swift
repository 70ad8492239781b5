internal import CALSA
import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio

/// An ALSA PCM that can capture, as listed by the ALSA configuration's name hints (what `arecord -L` shows).
public struct CaptureDevice: Sendable, Equatable {
    /// The PCM name to pass as a device, e.g. `default`, `sysdefault:CARD=PCH`, `dsnoop:CARD=Mic,DEV=0`.
    public var name: String
    /// ALSA's description lines, joined by newlines (may be empty).
    public var description: String

    public init(name: String, description: String) {
        self.name = name
        self.description = description
    }

    /// The PCMs whose hints say they capture (`IOID` is `Input` or absent), in ALSA's order.
    ///
    /// - Throws: ``EarshotError`` `.unavailable` when the ALSA configuration cannot be read. The corresponding C
    ///   function is `snd_device_name_hint`.
    public static func capturePCMs() throws -> [CaptureDevice] {
        var hints: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
        let (status, message) = ALSADiagnostics.capturing { snd_device_name_hint(-1, "pcm", &hints) }
        guard status >= 0, let hints else {
            let error = ALSAError(function: "snd_device_name_hint", code: status, detail: message)
            throw EarshotError(
                .unavailable, "cannot list ALSA devices: \(error.text) (check /usr/share/alsa/alsa.conf and ~/.asoundrc)",
                cause: error.description)
        }
        defer { _ = snd_device_name_free_hint(hints) }  // frees memory; always 0
        var devices: [CaptureDevice] = []
        var index = 0
        while let hint = hints[index] {
            index += 1
            let direction = Self.hintValue(hint, "IOID")
            guard direction == nil || direction == "Input", let name = Self.hintValue(hint, "NAME") else { continue }
            devices.append(CaptureDevice(name: name, description: Self.hintValue(hint, "DESC") ?? ""))
        }
        return devices
    }

    private static func hintValue(_ hint: UnsafeMutableRawPointer, _ key: String) -> String? {
        guard let value = snd_device_name_get_hint(hint, key) else { return nil }
        defer { free(value) }
        return String(cString: value)
    }
}

/// A sound card and its capture devices (what `arecord -l` shows).
public struct SoundCard: Sendable, Equatable {
    /// A capture device on the card: open it as `hw:CARD,DEVICE` (or `plughw:` to let ALSA convert).
    public struct Device: Sendable, Equatable {
        /// The device number on the card.
        public var index: Int
        /// The driver's name for it, e.g. `ALC892 Analog`.
        public var name: String

        public init(index: Int, name: String) {
            self.index = index
            self.name = name
        }
    }

    /// The card number (`hw:N`).
    public var index: Int
    /// The card's short id, e.g. `PCH` (`hw:CARD=PCH`).
    public var id: String
    /// The card's name, e.g. `HDA Intel PCH`.
    public var name: String
    /// Its capture devices (empty for playback-only cards).
    public var captureDevices: [Device]

    public init(index: Int, id: String, name: String, captureDevices: [Device]) {
        self.index = index
        self.id = id
        self.name = name
        self.captureDevices = captureDevices
    }

    /// The sound cards the kernel reports, in card order. A card whose control device cannot be opened (no
    /// permission) is listed without capture devices.
    ///
    /// The corresponding C functions are `snd_card_next`, `snd_ctl_open`, `snd_ctl_card_info`,
    /// `snd_ctl_pcm_next_device` and `snd_ctl_pcm_info`.
    public static func all() -> [SoundCard] {
        var cards: [SoundCard] = []
        var card: Int32 = -1
        while snd_card_next(&card) >= 0, card >= 0 {
            cards.append(describe(card: card))
        }
        return cards
    }

    private static func describe(card: Int32) -> SoundCard {
        var name: UnsafeMutablePointer<CChar>?
        var cardName = "card \(card)"
        if snd_card_get_name(card, &name) >= 0, let name {
            cardName = String(cString: name)
            free(name)
        }
        var result = SoundCard(index: Int(card), id: "\(card)", name: cardName, captureDevices: [])
        var control: OpaquePointer?
        let (opened, _) = ALSADiagnostics.capturing { snd_ctl_open(&control, "hw:\(card)", 0) }
        guard opened >= 0, let control else { return result }
        defer { _ = snd_ctl_close(control) }  // nothing to do on failure: the handle is freed either way
        var cardInfo: OpaquePointer?
        if snd_ctl_card_info_malloc(&cardInfo) >= 0, let cardInfo {
            if snd_ctl_card_info(control, cardInfo) >= 0, let id = snd_ctl_card_info_get_id(cardInfo) {
                result.id = String(cString: id)
            }
            snd_ctl_card_info_free(cardInfo)
        }
        var pcmInfo: OpaquePointer?
        guard snd_pcm_info_malloc(&pcmInfo) >= 0, let pcmInfo else { return result }
        defer { snd_pcm_info_free(pcmInfo) }
        var device: Int32 = -1
        while snd_ctl_pcm_next_device(control, &device) >= 0, device >= 0 {
            snd_pcm_info_set_device(pcmInfo, UInt32(device))
            snd_pcm_info_set_subdevice(pcmInfo, 0)
            snd_pcm_info_set_stream(pcmInfo, SND_PCM_STREAM_CAPTURE)
            // Fails with -ENOENT for a playback-only device: not a capture device, skip it.
            guard snd_ctl_pcm_info(control, pcmInfo) >= 0 else { continue }
            let deviceName = snd_pcm_info_get_name(pcmInfo).map { String(cString: $0) } ?? ""
            result.captureDevices.append(Device(index: Int(device), name: deviceName))
        }
        return result
    }
}

/// The text `earshot devices` prints.
public enum CaptureDeviceReport {
    /// Lists `pcms` (name, then each description line indented) and `cards` (one line per capture device, as
    /// `hw:CARD,DEVICE`); says so when there are none.
    public static func text(pcms: [CaptureDevice], cards: [SoundCard]) -> String {
        var lines = ["Capture PCMs (pass a name to earshotd --device):"]
        if pcms.isEmpty { lines.append("  (none)") }
        for pcm in pcms {
            lines.append("  \(pcm.name)")
            for line in pcm.description.split(separator: "\n", omittingEmptySubsequences: true) {
                lines.append("      \(line)")
            }
        }
        lines.append("")
        let withCapture = cards.filter { !$0.captureDevices.isEmpty }
        if cards.isEmpty {
            lines.append("Sound cards: none found (no audio hardware is visible to this user; see /proc/asound/cards)")
        } else {
            lines.append("Sound cards with capture devices:")
            if withCapture.isEmpty { lines.append("  (none: the cards found have no capture devices)") }
            for card in withCapture {
                for device in card.captureDevices {
                    lines.append("  hw:\(card.index),\(device.index)  \(card.name) [\(card.id)]: \(device.name)")
                }
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
