import FoundationEssentials
import Glibc
import EarshotSupport

/// Publishing to an MQTT broker, with Home Assistant discovery: `[mqtt]`. Off by default.
///
/// Topics (`P` = ``topicPrefix``/``node``): `P/availability`, `P/GROUP/state`, `P/GROUP/attributes`,
/// `P/GROUP/enabled`, `P/GROUP/set`, `P/event`, `P/detected`, `P/level`, `P/capture/state`,
/// `P/capture/attributes`, `P/sleep/state`, `P/sleep/set`, `P/sleep/report`, `P/alarm_chirp/state` (see ``MQTTTopics``).
package struct MQTTSettings: Sendable, Equatable {
    /// Whether the daemon publishes to the broker. Key `enabled`, default false.
    package var enabled = false
    /// The broker's host name or address. Key `host`, default `localhost`.
    package var host = "localhost"
    /// The broker's TCP port. Key `port`, 1...65535; empty or absent: 1883, or 8883 when ``tls`` is on.
    package var port: Int {
        get { explicitPort ?? (tls ? 8883 : 1883) }
        set { explicitPort = newValue }
    }
    private var explicitPort: Int?
    /// The user name sent to the broker; empty (the default) sends none. Key `username`.
    package var username = ""
    /// A file holding the password (its first line; readable by the daemon's user alone: `chown root:earshot`,
    /// `chmod 640`; every local user being able to read it is warned about). Key `password_file`; empty (the
    /// default) sends none. An inline `password` key is refused: a configuration file is often world-readable.
    package var passwordFile = ""
    /// The password read from ``passwordFile`` by ``readPassword()``; nil until then. Not part of equality.
    package var password: String? {
        get { secret.value }
        set { secret.value = newValue }
    }
    private var secret = Secret()
    /// Whether to connect with TLS. Key `tls`, default false.
    package var tls = false
    /// PEM file of the certificate authorities the broker's certificate is checked against. Key `cafile`; empty
    /// (the default) uses the system's, `/etc/ssl/certs`.
    package var caFile = ""
    /// PEM client certificate and its key, for brokers that authenticate clients by certificate. Keys `certfile`
    /// and `keyfile`: both or neither.
    package var certFile = ""
    package var keyFile = ""
    /// This daemon's name on the broker: one per microphone (`kitchen`, `nursery`). Key `node`, 1 to 64 of
    /// `[a-z0-9_-]`; empty or absent: `$EARSHOT_DEFAULT_NODE` (which `earshotd@NAME.service` sets to `NAME`), else
    /// the host name, lowercased, other characters replaced by `_` (``defaultNode``).
    package var node = MQTTSettings.defaultNode
    /// The room Home Assistant puts this daemon's device in when it first sees it (the device block's
    /// `suggested_area`; the user may move it later); nil: none. Key `area`, free text of 1 to 64 UTF-8 bytes without
    /// control characters; empty: none; absent: `$EARSHOT_DEFAULT_NODE` as it is (the instance name under
    /// `earshotd@NAME`), else none (``defaultArea``).
    package var area = MQTTSettings.defaultArea
    /// The first topic level. Key `topic_prefix`, default `earshot`.
    package var topicPrefix = "earshot"
    /// Whether to publish Home Assistant discovery configs. Key `discovery`, default true.
    package var discovery = true
    /// Home Assistant's discovery prefix. Key `discovery_prefix`, default `homeassistant`.
    package var discoveryPrefix = "homeassistant"
    /// Seconds between keep-alive pings; the broker declares the daemon gone (and publishes its `offline` Last
    /// Will) after 1.5 times this without a packet. Key `keepalive`, 5...3600, default 30.
    package var keepaliveSeconds = 30
    /// The MQTT client identifier (unique per broker). Key `client_id`; empty or absent: `earshot-NODE`.
    package var clientID: String {
        get { explicitClientID ?? "earshot-\(node)" }
        set { explicitClientID = newValue }
    }
    private var explicitClientID: String?
    /// Seconds between `P/level` messages while the level changes by less than ``levelStepDB``; nil: no level
    /// topic and no `Sound level` sensor. Key `level_interval`, 10...86400 or `off`, default 60.
    package var levelIntervalSeconds: Int? = 60
    /// A level this far (dB) from the one last published, or the gate opening or closing, is published at once
    /// (at most once a second). Key `level_step`, 0.5...120, default 3.
    package var levelStepDB = 3.0
    /// Seconds the `Smoke alarm battery` sensor (`P/alarm_chirp/state`) stays `ON` after the last low-battery chirp
    /// event (`alarm_chirp` onset), and after a start, before it turns `OFF` (not a key; tests shorten it). Default
    /// 7200 (2 hours): a smoke or CO alarm with a dying battery chirps every 30 to 60 s, for days, until the battery
    /// is replaced, and the pattern detector makes one `alarm_chirp` event per 15 minutes of it
    /// (`AlarmDetector.Configuration.chirpRepeatSeconds`, 900 s); 2 hours without one is 8 such periods and 120 to 240
    /// chirps unheard: the battery was replaced (or the alarm taken down), not a series half drowned by a television
    /// or missed during a short capture outage. Some alarms chirp only in the cool hours of the night: the sensor then
    /// turns `OFF` by day and `ON` again the next night. The last chirp's time is not kept across a restart: a
    /// retained `ON` stays until this long after the start without a chirp.
    package var batteryLowHoldSeconds: Double = 7200
    /// Seconds a connection must last, once the daemon has said that another client seems to use its client id
    /// (the broker dropping it right after each connect, ``MQTTConnection/quickDropsForClientIDHint`` times in a
    /// row), before `mqtt_connected` is said again (not a key; tests shorten it). Default 60: until then the drops
    /// and reconnects of that fight, one pair every few seconds for as long as both clients run (audit 13 F5: 11 in
    /// 35 s), are not said again. Well above ``MQTTConnection/maximumBackoff`` (5 s): in such a fight each
    /// connection lasts until the other client's next attempt, up to 5 s later.
    package var clientIDConflictStableSeconds: Double = 60

    package init() {}

    /// `P`: the prefix of every topic but discovery's.
    package var baseTopic: String { "\(topicPrefix)/\(node)" }

    /// The environment variable naming the default node: `earshotd@.service` sets it to the instance name, so that
    /// two instances on one host never share a node (and a client id) unless their files say so (trial 7 #10).
    package static let defaultNodeVariable = "EARSHOT_DEFAULT_NODE"

    /// `$EARSHOT_DEFAULT_NODE` when set and not empty, else the host name; reduced to `[a-z0-9_-]` (other
    /// characters become `_`), at most 64 characters; `earshot` when that leaves nothing.
    package static var defaultNode: String {
        if let value = getenv(defaultNodeVariable).map({ String(cString: $0) }), !value.isEmpty {
            return node(fromHostName: value)
        }
        var buffer = [CChar](repeating: 0, count: 256)
        let name = gethostname(&buffer, buffer.count - 1) == 0
            ? buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) } : ""
        return node(fromHostName: name)
    }

    /// `$EARSHOT_DEFAULT_NODE` when it is set and a valid ``area`` (the instance name `earshotd@NAME` runs as: a
    /// node is usually named after its room), else nil: a host name says nothing about a room.
    package static var defaultArea: String? {
        guard let value = getenv(defaultNodeVariable).map({ String(cString: $0) }), isArea(value) else { return nil }
        return value
    }

    /// 1 to 64 UTF-8 bytes, no control characters.
    private static func isArea(_ value: String) -> Bool {
        (1...64).contains(value.utf8.count) && value.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value != 0x7F }
    }

    package static func node(fromHostName name: String) -> String {
        let reduced = String(name.lowercased().prefix(64).map { isNodeCharacter($0) ? $0 : "_" })
        return reduced.allSatisfy({ $0 == "_" }) ? "earshot" : reduced
    }

    private static func isNodeCharacter(_ character: Character) -> Bool {
        ("a"..."z").contains(character) || ("0"..."9").contains(character) || character == "_" || character == "-"
    }

    /// The keys of `[mqtt]`, in the order `config/earshotd.conf` documents them.
    package static let keys = [
        "enabled", "host", "port", "username", "password_file", "tls", "cafile", "certfile", "keyfile", "node",
        "topic_prefix", "area", "discovery", "discovery_prefix", "keepalive", "client_id", "level_interval", "level_step",
    ]

    /// Sets one `[mqtt]` key; returns what is allowed ("must be ...") when `value` is bad.
    package mutating func set(key: String, value: String) -> String? {
        switch key {
        case "enabled", "tls", "discovery":
            guard let flag = SettingRules.flag.parse(value) else { return SettingRules.flag.requirement }
            if key == "enabled" { enabled = flag } else if key == "tls" { tls = flag } else { discovery = flag }
        case "host":
            guard !value.isEmpty, value.utf8.count <= 253, !value.contains(where: { $0.isWhitespace || $0 == "/" })
            else { return "must be a host name or address, e.g. localhost or 192.168.1.10" }
            // `host:port` (one colon, digits after it; an IPv6 address has several): the port has its own key.
            if let colon = value.firstIndex(of: ":"), value.filter({ $0 == ":" }).count == 1 {
                let port = value[value.index(after: colon)...]
                if !port.isEmpty, port.allSatisfy(\.isASCII), port.allSatisfy(\.isNumber) {
                    return "has a port: put the port in [mqtt] port (host = \(value[..<colon]) and port = \(port))"
                }
            }
            host = value
        case "port":
            if value.isEmpty { explicitPort = nil; return nil }
            guard let number = Int(value), (1...65_535).contains(number) else { return "must be a whole number in [1, 65535]" }
            port = number
        case "username":
            guard value.utf8.count <= 256 else { return "must be at most 256 bytes" }
            username = value
        case "password_file", "cafile", "certfile", "keyfile":
            guard value.isEmpty || value.hasPrefix("/") else { return "must be an absolute file path, e.g. /etc/earshot/mqtt-password" }
            switch key {
            case "password_file": passwordFile = value
            case "cafile": caFile = value
            case "certfile": certFile = value
            default: keyFile = value
            }
        case "node":
            if value.isEmpty { node = Self.defaultNode; return nil }
            guard (1...64).contains(value.count), value.allSatisfy(Self.isNodeCharacter) else {
                return "must be 1 to 64 of a-z, 0-9, _ and -, e.g. kitchen"
            }
            node = value
        case "area":
            if value.isEmpty { area = nil; return nil }
            guard Self.isArea(value) else {
                return "must be 1 to 64 bytes of text without control characters, e.g. Kitchen (empty: no area)"
            }
            area = value
        case "topic_prefix", "discovery_prefix":
            guard Self.isTopicPrefix(value) else {
                return "must be topic levels without wildcards, e.g. \(key == "topic_prefix" ? "earshot" : "homeassistant") (no +, #, spaces, leading $, or leading/trailing /)"
            }
            if key == "topic_prefix" { topicPrefix = value } else { discoveryPrefix = value }
        case "keepalive":
            guard let seconds = Int(value), (5...3_600).contains(seconds) else { return "must be a whole number in [5, 3600] seconds" }
            keepaliveSeconds = seconds
        case "client_id":
            if value.isEmpty { explicitClientID = nil; return nil }
            guard (1...128).contains(value.utf8.count), value.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F })
            else { return "must be 1 to 128 printable ASCII characters without spaces" }
            clientID = value
        case "level_interval":
            if value == "off" { levelIntervalSeconds = nil; return nil }
            guard let seconds = Int(value), (10...86_400).contains(seconds) else {
                return "must be a whole number of seconds in [10, 86400], or off (no level sensor)"
            }
            levelIntervalSeconds = seconds
        case "level_step":
            guard let step = Double(value), step.isFinite, (0.5...120).contains(step) else { return "must be a number in [0.5, 120] dB" }
            levelStepDB = step
        default:
            return "is not a known key (report this as a bug)"
        }
        return nil
    }

    /// A topic prefix: non-empty levels of printable characters, no wildcards.
    package static func isTopicPrefix(_ value: String) -> Bool {
        // `$` topics are the broker's own ($SYS): a client's publishes there go nowhere.
        guard !value.isEmpty, value.utf8.count <= 128, !value.hasPrefix("/"), !value.hasSuffix("/"), !value.hasPrefix("$")
        else { return false }
        return value.unicodeScalars.allSatisfy { $0.value > 0x20 && $0 != "+" && $0 != "#" && $0.value != 0x7F }
            && !value.contains("//")
    }

    /// What is missing or inconsistent once every key is read, or nil: `password_file` without `username`,
    /// `certfile` without `keyfile` (or the other way round), TLS files given with `tls = false`.
    package var inconsistency: String? {
        if !passwordFile.isEmpty, username.isEmpty {
            // libmosquitto sends a password only with a user name: without one it would never reach the broker.
            return "password_file needs username (set [mqtt] username to the broker's user for that password)"
        }
        if certFile.isEmpty != keyFile.isEmpty {
            return "certfile and keyfile go together (set both, or neither)"
        }
        if !tls, !(caFile.isEmpty && certFile.isEmpty) {
            return "cafile, certfile and keyfile need tls = true"
        }
        return nil
    }

    /// Reads ``passwordFile`` into ``password`` (its first line, without the line end).
    /// - Throws: a one-line description of why not (missing, unreadable, not a regular file, empty), without the
    ///   key's location (the caller adds it).
    package mutating func readPassword() throws(EarshotError) {
        guard !passwordFile.isEmpty else { password = nil; return }
        switch PathKind(path: passwordFile) {
        case .regularFile: break
        case .missing:
            throw EarshotError(.config, "\(passwordFile): no such file (create it with the password on one line, readable by the daemon's user alone, e.g. chown root:earshot and chmod 640)")
        default:
            throw EarshotError(.config, "\(passwordFile): is not a regular file (point password_file at a file holding the password)")
        }
        let descriptor = open(passwordFile, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            let reason = String(cString: strerror(errno))
            throw EarshotError(.config, "\(passwordFile): cannot read: \(reason) (make it readable by the daemon's user)")
        }
        defer { close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: 4097)
        let count = read(descriptor, &bytes, bytes.count)
        guard count >= 0 else {
            throw EarshotError(.config, "\(passwordFile): cannot read: \(String(cString: strerror(errno)))")
        }
        guard count < bytes.count else { throw EarshotError(.config, "\(passwordFile): longer than 4096 bytes (it should hold the password alone)") }
        let end = bytes[0..<count].firstIndex { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") } ?? count
        let value = String(decoding: bytes[0..<end], as: UTF8.self)
        guard !value.isEmpty else {
            throw EarshotError(.config, "\(passwordFile): is empty (write the password on its first line)")
        }
        password = value
    }

    /// The TLS files named (`cafile`, `certfile`, `keyfile`) that are not readable regular files, with why, as
    /// `(key, path, reason)`; empty when TLS is off.
    package var tlsFileProblems: [(key: String, path: String, reason: String)] {
        guard tls else { return [] }
        var problems: [(String, String, String)] = []
        for (key, path) in [("cafile", caFile), ("certfile", certFile), ("keyfile", keyFile)] where !path.isEmpty {
            switch PathKind(path: path) {
            case .regularFile:
                if access(path, R_OK) != 0 { problems.append((key, path, "cannot be read: \(String(cString: strerror(errno))) (make it readable by the daemon's user)")) }
            case .missing: problems.append((key, path, "no such file (check the path; a PEM file)"))
            default: problems.append((key, path, "is not a regular file (point \(key) at a PEM file)"))
            }
        }
        return problems
    }

    /// Holds the password outside equality (two configurations with the same keys are equal).
    private struct Secret: Sendable, Equatable {
        var value: String?
        static func == (lhs: Secret, rhs: Secret) -> Bool { true }
    }
}
