import Glibc
import EarshotSupport
import EarshotOutputs

extension DaemonConfiguration {
    /// The user the shipped units run earshotd as (`User=earshot`): `--check-config` run as root checks that the
    /// user the installed units name (``ServiceUnits/users(in:)``), this one with the package's units, can read
    /// the files holding secrets (``checkSecretFiles(readableBy:)``).
    package static let serviceUser = "earshot"

    /// The files holding secrets that the daemon reads, with their key (`[mqtt] password_file`) and where it was set:
    /// `[mqtt] password_file` with `[mqtt] enabled`, and `[notify] url_file`.
    private var secretFiles: [(key: String, path: String, origin: String)] {
        var files: [(String, String, String)] = []
        if mqtt.enabled, !mqtt.passwordFile.isEmpty {
            files.append(("[mqtt] password_file", mqtt.passwordFile, locations["mqtt.password_file"].map { "\($0): " } ?? ""))
        }
        if !notify.urlFile.isEmpty {
            files.append(("[notify] url_file", notify.urlFile, locations["notify.url_file"].map { "\($0): " } ?? ""))
        }
        return files
    }

    /// Reads `[notify] url_file` (when one is named) into `notify.urls`, after `url`'s URLs: see
    /// ``NotifySettings/readURLFile()``. Run once per configuration read, as ``readMQTTPassword()``.
    /// - Throws: `EarshotError(.config)` (78) naming where the key was set, e.g. `/etc/earshot/earshotd.conf:20:
    ///   [notify] url_file = /etc/earshot/notify-urls: line 2: "ftp://example.com/hook" is not an http:// or
    ///   https:// URL (one URL per line)`.
    package mutating func readNotifyURLs() throws(EarshotError) {
        do {
            try notify.readURLFile()
        } catch {
            let origin = locations["notify.url_file"].map { "\($0): " } ?? ""
            throw EarshotError(.config, "\(origin)[notify] url_file = \(notify.urlFile): \(error.message)")
        }
    }

    /// Secrets every local user can read, one warning line each (part of ``warnings()``): a `[mqtt] password_file`
    /// or `[notify] url_file` others may read (``SecretFile/readableByEveryone(_:)``: the others' read bit, and
    /// their search bit on each directory above), and `[notify] url` written in a configuration file they may read
    /// (an ntfy topic or a webhook token is a password to the household's alerts), e.g.
    /// `/etc/earshot/earshotd.conf:12: [mqtt] password_file = /etc/earshot/mqtt-password: every local user can
    /// read it, mode 0644 (make it readable by earshotd's user alone: chown root:earshot and chmod 640)`.
    func secretWarnings() -> [String] {
        var lines: [String] = []
        if notify.urls.count > notify.fileURLCount, let origin = locations["notify.url"],
           let colon = origin.lastIndex(of: ":")
        {
            let file = String(origin[..<colon])
            if let mode = SecretFile.readableByEveryone(file) {
                lines.append("\(origin): [notify] url: every local user can read \(file), mode \(SecretFile.octal(mode)), and a notification URL is a password to your alerts (move the URLs to a file readable by earshotd's user alone, e.g. chown root:earshot and chmod 640, and name it with [notify] url_file)")
            }
        }
        for file in secretFiles {
            guard let mode = SecretFile.readableByEveryone(file.path) else { continue }
            lines.append("\(file.origin)\(file.key) = \(file.path): every local user can read it, mode \(SecretFile.octal(mode)) (make it readable by earshotd's user alone: chown root:earshot and chmod 640)")
        }
        return lines
    }

    /// For `--check-config` run as root, which reads any file: that `user` (the service's, ``ServiceUnits``) can read
    /// each file holding a secret, as the daemon must at start (``SecretFile/unreadableReason(_:user:)``; nothing
    /// to check when no such user exists).
    /// - Throws: `EarshotError(.config)` (78), as the start would fail, e.g. `/etc/earshot/earshotd.conf:12: [mqtt]
    ///   password_file = /etc/earshot/mqtt-password: earshot, the user the service runs as, cannot read it: owner
    ///   root, group root, mode 0600 (chown root:earshot and chmod 640 it)`.
    package func checkSecretFiles(readableBy user: String) throws(EarshotError) {
        for file in secretFiles {
            guard let reason = SecretFile.unreadableReason(file.path, user: user) else { continue }
            let fix = reason.hasPrefix("the directory")
                ? "let \(user) through that directory, e.g. chmod o+x it, or move the file to /etc/earshot"
                : "chown root:\(SecretFile.primaryGroup(ofUser: user) ?? user) and chmod 640 it"
            throw EarshotError(.config, "\(file.origin)\(file.key) = \(file.path): \(user), the user the service runs as, cannot read it: \(reason) (\(fix))")
        }
    }
}
