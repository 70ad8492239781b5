import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotOutputs
import EarshotService

/// Writes `text` to `path` readable by the service's user alone, as the README says: mode 0640, group `earshot`
/// when the tests run as root and that group exists (else the test user's own file, mode 0640). No warning, and a
/// `--check-config` run as root passes with it.
enum ServiceSecretFile {
    static func write(_ text: String, to path: String) throws {
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        #expect(chmod(path, 0o640) == 0)
        if geteuid() == 0, let group = getgrnam(DaemonConfiguration.serviceUser) {
            #expect(chown(path, 0, group.pointee.gr_gid) == 0)
        }
    }
}

/// Notification URLs and the MQTT password are secrets (an ntfy topic is the only password of its channel): kept out
/// of the world-readable configuration (`[notify] url_file`), never printed in full, warned about when every local
/// user can read them, and checked for the service's user by a root `--check-config` (trial 13 D2, D3, D6, D7).
@Suite("Notify and MQTT secrets: url_file, redacted errors, unusable URLs, file permissions")
struct NotifySecretTests {
    /// A fresh directory under /tmp, mode 0755 (the service's user may go through it), removed by `remove()`.
    struct Scratch {
        let path: String

        init() throws {
            var template = Array("/tmp/earshot-secret-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { throw EarshotError(.cannotCreate, "mkdtemp failed") }
            path = String(cString: made)
            #expect(chmod(path, 0o755) == 0)
        }

        func file(_ name: String) -> String { path + "/" + name }

        /// Writes `text` to `name` with `mode`; its path.
        @discardableResult
        func write(_ name: String, _ text: String, mode: mode_t) throws -> String {
            try text.write(toFile: file(name), atomically: false, encoding: .utf8)
            #expect(chmod(file(name), mode) == 0)
            return file(name)
        }

        func remove() { try? FileManager.default.removeItem(atPath: path) }
    }

    static func parseError(_ text: String) -> String? {
        do {
            _ = try DaemonConfiguration.parse(text, source: "n.conf")
            return nil
        } catch {
            return error.message
        }
    }

    @Test("health events, test alerts and reload lines show a URL cut to 4 characters per path segment, ?… for a query, then, where 8 characters or more are left out, a fingerprint of them (FNV-1a folded to 8 bits), so that topics that begin alike are told apart (trial 16 M3, trial 17 L1, L2)")
    func shownURLFingerprint() {
        // The digits are FNV-1a of the text after host[:port], computed independently (Python) for this test.
        #expect(NotifySettings.shownURL("https://ntfy.sh/earshot-kitchen-7f3k2q", index: 0, count: 1) == "https://ntfy.sh/ears…#64")
        #expect(NotifySettings.shownURL("https://ntfy.sh/earshot-kitchen-9x2m4p", index: 0, count: 1) == "https://ntfy.sh/ears…#77")
        #expect(NotifySettings.shownURL("https://ntfy.sh/earshot-kitchen-7f3k2q?auth=x", index: 1, count: 2) == "https://ntfy.sh/ears…?…#82 (url 2 of 2)")
        // User and password, a query: never shown, but they make the fingerprint.
        #expect(NotifySettings.shownURL("https://alice:s3cret@ntfy.sh/alerts", index: 0, count: 1) == "https://…@ntfy.sh/aler…#3c")
        #expect(NotifySettings.shownURL("https://example.com/hook?token=abc123", index: 0, count: 1) == "https://example.com/hook?…#e6")
        #expect(NotifySettings.shownURL("https://hooks.example.com/services/T000/B000/XXXXXXXX", index: 0, count: 1)
            == "https://hooks.example.com/serv…/T000/B000/XXXX…#80")
        #expect(NotifySettings.shownURL("http://user:pw@127.0.0.1:8080/ok/x", index: 0, count: 1) == "http://…@127.0.0.1:8080/ok/x#ec")
        // Fewer than 8 characters left out: no fingerprint, which would give most of them away.
        #expect(NotifySettings.shownURL("https://ntfy.sh/alarm2", index: 0, count: 1) == "https://ntfy.sh/alar…")
        #expect(NotifySettings.shownURL("https://ntfy.sh/home-9x2m4p", index: 0, count: 1) == "https://ntfy.sh/home…")
        #expect(NotifySettings.shownURL("https://ntfy.sh/home-9x2m4pq", index: 0, count: 1) == "https://ntfy.sh/home…#e1")
        // Nothing left out: nothing added, whatever the port or the scheme's case.
        #expect(NotifySettings.shownURL("http://127.0.0.1:8080/a", index: 0, count: 2) == "http://127.0.0.1:8080/a (url 1 of 2)")
        #expect(NotifySettings.shownURL("HTTP://127.0.0.1:8080/abcd", index: 0, count: 1) == "http://127.0.0.1:8080/abcd")
        #expect(NotifySettings.fingerprint("/earshot-kitchen-7f3k2q") == "64")
        #expect(NotifySettings.fingerprint("/home-9x2m4pq") == "e1")
        // Configuration errors name the file and line: no fingerprint there.
        #expect(NotifySettings.shownURL("https://ntfy.sh/earshot-kitchen-7f3k2q") == "https://ntfy.sh/ears…")
    }

    @Test("configuration errors show a notification URL as the logs do: no user, password, query, nor more than 4 characters of a path segment")
    func errorsRedactURLs() throws {
        let cases: [(String, String)] = [
            ("url = http://u:Pw9@127.0.0.1:1/tok-SECRET?x=QS9,",
             #"n.conf:2: [notify] url: "http://127.0.0.1:1/tok-…" ends with ","; separate several URLs with spaces, not commas, e.g. url = https://ntfy.sh/topic-a https://ntfy.sh/topic-b"#),
            ("url = ftp://u:Pw9@127.0.0.1:1/tok-SECRET",
             #"n.conf:2: [notify] url: "ftp://127.0.0.1:1/tok-…" is not an http:// or https:// URL; separate several URLs with spaces, e.g. https://ntfy.sh/my-earshot-alerts"#),
            // Not a URL at all: the part that reads as a host stays, the rest is cut as a path is.
            ("url = ntfy.sh/tok-SECRET",
             #"n.conf:2: [notify] url: "ntfy.sh/tok-…" is not an http:// or https:// URL; separate several URLs with spaces, e.g. https://ntfy.sh/my-earshot-alerts"#),
            // A bare topic name is the secret itself.
            ("url = tok-SECRET",
             #"n.conf:2: [notify] url: "tok-…" is not an http:// or https:// URL; separate several URLs with spaces, e.g. https://ntfy.sh/my-earshot-alerts"#),
            ("format = ntfy\n  http://alice:AlicePw@127.0.0.1:18080/failtopic-SECRET2?auth=QSECRET2",
             #"n.conf:3: [notify] format: the indented line "http://127.0.0.1:18080/fail…" continues the value of format, which takes one line; remove the indentation"#),
            ("url = http://127.0.0.1:1/a\n  topic = http://u:Pw9@127.0.0.1:1/tok-SECRET",
             #"n.conf:3: [notify] url: the indented line "topic = http://127.0.0.1:1/tok-…" is read as more of the url list; remove the indentation to start a new key"#),
        ]
        for (lines, message) in cases {
            let error = try #require(Self.parseError("[notify]\n\(lines)\n"), "\(lines)")
            #expect(error == message)
            for secret in ["Pw9", "SECRET", "QS9", "alice"] { #expect(!error.contains(secret), "\(error)") }
        }
    }

    @Test("every configuration error shows a URL cut, whatever key or line quotes it: url_file, groups, a bare HOST/PATH line, another section's indented line, an unknown key, a password holding / (audit 14 F2)")
    func everyErrorRedactsURLs() throws {
        let long = "ntfy.sh/my-very-secret-topic-123-" + String(repeating: "a", count: 40)
        let cases: [(String, String)] = [
            ("[notify]\nurl_file = https://ntfy.sh/secret-topic-abc",
             "n.conf:2: [notify] url_file = https://ntfy.sh/secr…: takes the path of a file holding the URLs, not a URL (write the URL in that file, one per line, or in url)"),
            ("[notify]\ngroups = https://ntfy.sh/secret-topic-abc",
             #"n.conf:2: [notify] groups = https://ntfy.sh/secr…: "https://ntfy.sh/secr…" is not a group name (1 to 64 lowercase letters, digits and _; separate names with |, commas or spaces)"#),
            ("[notify]\ngroups = smoke_alarm ntfy.sh/secret-topic-abc",
             #"n.conf:2: [notify] groups = smoke_alarm ntfy.sh/secr…: "ntfy.sh/secr…" is not a group name (1 to 64 lowercase letters, digits and _; separate names with |, commas or spaces)"#),
            // A URL pasted without its scheme on a line of its own: the syntax error quotes the line.
            ("[notify]\nurl = https://ntfy.sh/abcdef\nntfy.sh/my-very-secret-topic-123",
             #"n.conf:3: expected "key = value", "[section]" or a comment, found "ntfy.sh/my-v…""#),
            // Longer than the 60 characters a syntax error quotes: cut, then shown cut.
            ("[notify]\n\(long)", #"n.conf:2: expected "key = value", "[section]" or a comment, found "ntfy.sh/my-v…...""#),
            ("[mqtt]\nhost = h\n  https://ntfy.sh/secret-topic-abc",
             #"n.conf:3: [mqtt] host: the indented line "https://ntfy.sh/secr…" continues the value of host, which takes one line; remove the indentation"#),
            ("[notify]\nntfy.sh/secret-topic-abc = 1",
             "n.conf:2: [notify] ntfy.sh/secr…: unknown key (keys: url, url_file, groups, format, on_end, health, repeat_after, timeout, retries, check_interval)"),
            // The authority ends at the first /: user and password would read as host and port.
            ("[notify]\nurl = https://alice:S3cr/etPassw0rd@hooks.example.com/x",
             #"n.conf:2: [notify] url: "https://hooks.example.com/x" has an @ after a / (a / in the user name or password is written %2F, an @ as %40)"#),
        ]
        for (lines, message) in cases {
            let error = try #require(Self.parseError(lines + "\n"), "\(lines)")
            #expect(error == message)
            for secret in ["secret-topic", "very-secret", "alice", "S3cr", "etPassw0rd"] { #expect(!error.contains(secret), "\(error)") }
        }
        // The message's own example URLs and a relative path that is not in the file stay whole.
        #expect(Self.parseError("[notify]\nurl = tok-SECRET\n")
            == #"n.conf:2: [notify] url: "tok-…" is not an http:// or https:// URL; separate several URLs with spaces, e.g. https://ntfy.sh/my-earshot-alerts"#)
        #expect(throws: EarshotError(.config, "conf.d/e.conf:2: [output] journal = maybe: must be true or false (or yes/no, on/off, 1/0)")) {
            _ = try DaemonConfiguration.parse("[output]\njournal = maybe\n", source: "conf.d/e.conf")
        }
    }

    @Test("earshotd --check-config shows a URL cut in an error found after the file was read (an unknown class), exit 78", .needsEarshotdBuilt)
    func checkConfigRedactsLaterErrors() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let config = try scratch.write("e.conf", """
            [output]
            socket = \(scratch.file("e.sock"))
            [detection]
            watch = smoke_alarm kettle
            [group.kettle]
            classes = https://ntfy.sh/secret-topic-abc
            threshold = 0.5

            """, mode: 0o600)
        let run = try #require(try EarshotdRun.run(["--config", config, "--check-config"]))
        #expect(run.status == 78)
        #expect(run.error == "earshotd: \(config):6: [group.kettle] classes: unknown class \"https://ntfy.sh/secr…\" (no model named https is loaded; add its file to [models] files)\n")
        #expect(run.output == "")
    }

    @Test("a URL libcurl could never use is refused when the configuration is read: port, IPv6 address, host name, two @")
    func unusableURLs() throws {
        let refused: [(String, String)] = [
            ("http://u:Pw9@127.0.0.1:99999/tok-SECRET?x=QS9", #""http://127.0.0.1:99999/tok-…" has the port "99999" (a port is a number from 1 to 65535)"#),
            ("http://127.0.0.1:0/x", #""http://127.0.0.1:0/x" has the port "0" (a port is a number from 1 to 65535)"#),
            ("http://127.0.0.1:80a/x", #""http://127.0.0.1:80a/x" has the port "80a" (a port is a number from 1 to 65535)"#),
            ("http://h:1:2/x", #""http://h:1:2/x" has the port "1:2" (a port is a number from 1 to 65535)"#),
            ("http://u:Pw9@[zz/x", #""http://[zz/x" has an IPv6 address without its closing ] (e.g. http://[fd00::1]:8080/)"#),
            ("http://[zz]:80/x", #""http://[zz]:80/x" has [zz], which is not an IPv6 address (e.g. http://[fd00::1]:8080/)"#),
            ("http://[::1]x/", #""http://[::1]x/" has "x" after its IPv6 address [::1] (only :PORT may follow it)"#),
            ("http://[::1]:70000/", #""http://[::1]:70000/" has the port "70000" (a port is a number from 1 to 65535)"#),
            ("http://ho$t:8080/x", #""http://ho$t:8080/x" has the host name "ho$t", which holds characters no host name has (letters, digits, - and .; an IPv6 address goes in brackets)"#),
            ("http://a%20b/x", #""http://a%20b/x" has the host name "a%20b", which holds characters no host name has (letters, digits, - and .; an IPv6 address goes in brackets)"#),
            ("http://a@b@127.0.0.1:1/x", #""http://127.0.0.1:1/x" has more than one @ before its host (write an @ in the user name or password as %40)"#),
        ]
        for (url, problem) in refused {
            #expect(Self.parseError("[notify]\nurl = \(url)\n") == "n.conf:2: [notify] url: \(problem)", "\(url)")
        }
        // What libcurl 7.88 takes (checked with curl -g): an IPv6 address with or without a zone, an empty port (the
        // scheme's), leading zeros, a user and password, an underscore, a %-encoded letter.
        let taken = [
            "http://[::1]:8080/a", "http://[fe80::1%25eth0]:1/b", "https://[::ffff:192.0.2.1]/c", "http://h:/x",
            "http://h:0080/x", "http://u:p@h.local:65535/x?y=1", "http://a_b.local/x", "http://%41/x",
        ]
        let configuration = try DaemonConfiguration.parse("[notify]\nurl = \(taken.joined(separator: " "))\n", source: "n.conf")
        #expect(configuration.notify.urls == taken)
    }

    @Test("earshotd --check-config refuses port 99999 in one redacted line, exit 78", .needsEarshotdBuilt)
    func checkConfigRefusesUnusableURL() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let config = try scratch.write(
            "e.conf", "[output]\nsocket = \(scratch.file("e.sock"))\n[notify]\nurl = http://u:Pw9@127.0.0.1:99999/tok-SECRET?x=QS9\n", mode: 0o600)
        let run = try #require(try EarshotdRun.run(["--config", config, "--check-config"]))
        #expect(run.status == 78)
        #expect(run.error == "earshotd: \(config):4: [notify] url: \"http://127.0.0.1:99999/tok-…\" has the port \"99999\" (a port is a number from 1 to 65535)\n")
        #expect(run.output == "")
    }

    @Test("[notify] url goes on over indented lines; a line too long and url set twice point there and to url_file")
    func urlListOverLines() throws {
        let hook = "https://discord.com/api/webhooks/123456789012345678/" + String(repeating: "a", count: 68)
        let configuration = try DaemonConfiguration.parse(
            "[notify]\nurl = \(hook)\n    \(hook)2 https://ntfy.sh/topic-b\n    https://hooks.example.net/x?token=a=b ; comment\nformat = ntfy\n",
            source: "n.conf")
        #expect(configuration.notify.urls == [hook, hook + "2", "https://ntfy.sh/topic-b", "https://hooks.example.net/x?token=a=b"])
        #expect(configuration.notify.format == .ntfy)
        #expect(Self.parseError("[notify]\nurl = \(hook) \(hook)\n")
            == "n.conf:2: line longer than 198 bytes; put the URLs on indented lines after url =, one per line, or in a file named by [notify] url_file")
        #expect(Self.parseError("[notify]\nurl = https://a.example/x\n    \(hook) \(hook)\n")
            == "n.conf:3: line longer than 198 bytes; put the URLs on indented lines after url =, one per line, or in a file named by [notify] url_file")
        // One URL too long for any line, on its own indented line or after url =: only url_file takes it (audit 14 F3).
        let huge = "https://hooks.example.com/services/" + String(repeating: "A", count: 1100)
        for (text, line) in [("[notify]\nurl =\n  \(huge)\n", 3), ("[notify]\nurl = https://a.example/x\n    \(huge)\n", 3),
                             ("[notify]\nurl = \(huge)\n", 2)] {
            #expect(Self.parseError(text)
                == "n.conf:\(line): line longer than 198 bytes; a URL of 198 bytes or more goes in a file named by [notify] url_file (one URL per line, no line limit)")
        }
        // 195 bytes: too long after "url = ", not on an indented line.
        let fits = "https://hooks.example.com/" + String(repeating: "A", count: 169)
        #expect(fits.utf8.count == 195)
        #expect(Self.parseError("[notify]\nurl = \(fits)\n")
            == "n.conf:2: line longer than 198 bytes; put the URLs on indented lines after url =, one per line, or in a file named by [notify] url_file")
        #expect(try DaemonConfiguration.parse("[notify]\nurl =\n  \(fits)\n", source: "n.conf").notify.urls == [fits])
        // Elsewhere the advice is the list's.
        #expect(Self.parseError("[detection]\nwatch = \(String(repeating: "baby_cry ", count: 23))\n")
            == "n.conf:2: line longer than 198 bytes; split a long list over indented continuation lines")
        #expect(Self.parseError("[notify]\nurl = https://a.example/x\nurl = https://b.example/y\n")
            == "n.conf:3: [notify] url: set twice (also on line 2); keep one, and put more URLs on indented lines after it or in a file named by [notify] url_file")
        #expect(Self.parseError("[notify]\nurl = https://a.example/x\n  groups = smoke_alarm\n")
            == #"n.conf:3: [notify] url: the indented line "groups = smoke_alarm" is read as more of the url list; remove the indentation to start a new key"#)
        #expect(Self.parseError("[notify]\nurl = https://a.example/x\n  https://b.example/y,\n")
            == #"n.conf:3: [notify] url: "https://b.example/y," ends with ","; separate several URLs with spaces, not commas, e.g. url = https://ntfy.sh/topic-a https://ntfy.sh/topic-b"#)
    }

    @Test("three webhook URLs of 120 bytes, one per indented line, pass earshotd --check-config", .needsEarshotdBuilt)
    func longURLListPassesCheckConfig() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let hooks = (1...3).map { "https://discord.com/api/webhooks/12345678901234567\($0)/" + String(repeating: "a", count: 68) }
        let config = try scratch.write(
            "e.conf",
            "[output]\nsocket = \(scratch.file("e.sock"))\n[notify]\nurl = \(hooks[0])\n    \(hooks[1])\n    \(hooks[2])\n", mode: 0o600)
        let run = try #require(try EarshotdRun.run(["--config", config, "--check-config"]))
        #expect(run.status == 0, "\(run.error)")
        #expect(run.output == "earshotd: configuration OK (watching smoke_alarm, fire_alarm, co_alarm, baby_cry, glass_break)\n")
        #expect(run.error == "")
    }

    @Test("url_file: one URL per line after url's (comments, blank lines, CRLF); each problem one redacted line naming the key, file and line")
    func urlFile() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let file = scratch.file("urls")
        func load(_ urls: String) throws -> DaemonConfiguration {
            var configuration = try DaemonConfiguration.parse(
                "[notify]\nurl = https://inline.example/a\nurl_file = \(file)\n", source: "n.conf")
            if !urls.isEmpty { try scratch.write("urls", urls, mode: 0o600) }
            try configuration.readNotifyURLs()
            return configuration
        }
        let good = try load("# the phone\r\nhttps://ntfy.sh/earshot-kitchen-7f3k2q\r\n\n   http://u:p@127.0.0.1:9/hook?t=1  \n")
        #expect(good.notify.urls == ["https://inline.example/a", "https://ntfy.sh/earshot-kitchen-7f3k2q", "http://u:p@127.0.0.1:9/hook?t=1"])
        #expect(good.notify.fileURLCount == 2)
        #expect(good.notify.enabled)

        let failures: [(String, String)] = [
            ("https://ntfy.sh/ok\nftp://u:Pw9@host/tok-SECRET\n", #"line 2: "ftp://host/tok-…" is not an http:// or https:// URL (one URL per line)"#),
            ("https://ntfy.sh/tok-SECRET https://ntfy.sh/other\n", #"line 1: "https://ntfy.sh/tok-…" is followed by "https://ntfy.sh/othe…" on its line (one URL per line)"#),
            ("https://ntfy.sh/tok-\u{1B}SECRET\n", #"line 1: "https://ntfy.sh/tok-…" contains spaces or control characters (one URL per line)"#),
            ("https://ntfy.sh/tok-SECRET,\n", #"line 1: "https://ntfy.sh/tok-…" ends with "," (one URL per line, nothing after it)"#),
            ("http://127.0.0.1:99999/tok-SECRET\n", #"line 1: "http://127.0.0.1:99999/tok-…" has the port "99999" (a port is a number from 1 to 65535)"#),
            ("# nothing yet\n\n", "holds no URL (write one URL per line; lines starting with # are comments)"),
            // Text that is no URL (a password file named by mistake, a bare topic) is never quoted.
            ("S3cretPassword\n", "line 1 is not an http:// or https:// URL (one URL per line)"),
            ("https://ntfy.sh/ok\nntfy.sh/tok-SECRET\n", "line 2 is not an http:// or https:// URL (one URL per line)"),
            ("https://ntfy.sh/tok-SECRET tok-SECRET2\n", #"line 1: "https://ntfy.sh/tok-…" is followed by more text on its line (one URL per line)"#),
        ]
        for (text, detail) in failures {
            #expect(throws: EarshotError(.config, "n.conf:3: [notify] url_file = \(file): \(detail)")) { _ = try load(text) }
        }
        #expect(unlink(file) == 0)
        #expect(throws: EarshotError(.config, "n.conf:3: [notify] url_file = \(file): no such file (create it with one URL per line, readable by the daemon's user alone, e.g. chown root:earshot and chmod 640)")) {
            _ = try load("")
        }
        #expect(mkdir(file, 0o700) == 0)
        #expect(throws: EarshotError(.config, "n.conf:3: [notify] url_file = \(file): is a directory, not a regular file (point url_file at a file holding the URLs, one per line)")) {
            _ = try load("")
        }
        #expect(Self.parseError("[notify]\nurl_file = notify-urls\n") == "n.conf:2: [notify] url_file = notify-urls: must be an absolute file path, e.g. /etc/earshot/notify-urls")
    }

    @Test("a daemon notifies the URLs of url_file after url's", .needsEarshotdBuilt)
    func daemonPostsToURLFile() throws {
        let receiver = try HTTPTestServer(answer: { _ in .init(status: 200) })
        defer { receiver.stop() }
        let scratch = try Scratch()
        defer { scratch.remove() }
        let urls = scratch.file("urls")
        try ServiceSecretFile.write("# the phone\n\(receiver.url("/from-file"))\n", to: urls)
        let config = try scratch.write("e.conf", """
            [output]
            socket = \(scratch.file("e.sock"))
            journal = false
            [history]
            enabled = false
            [notify]
            url = \(receiver.url("/inline"))
            url_file = \(urls)
            format = json

            """, mode: 0o600)
        // Health messages need no sound: earshotd starting to listen (its first audio, 2 s of silence) is one, to
        // each URL.
        let daemon = try DaemonProcess(["--config", config, "--foreground", "--input", "-"], standardInput: true)
        daemon.input.fileHandleForWriting.write(Data(count: 64_000))
        let requests = receiver.waitForRequests(2, timeout: 30)
        #expect(Set(requests.map(\.path)) == ["/inline", "/from-file"], "\(daemon.errorText)")
        #expect(requests.allSatisfy { $0.body.hasPrefix(#"{"type":"health","state":"capture_live","#) }, "\(requests.map(\.body))")
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 30) == 0, "\(daemon.errorText)")
        #expect(!daemon.errorText.contains("warning:"), "\(daemon.errorText)")
    }

    @Test("secrets every local user can read are warned about: [notify] url in a world-readable file, url_file, [mqtt] password_file")
    func worldReadableSecretsWarn() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let urls = try scratch.write("urls", "https://ntfy.sh/earshot-kitchen-7f3k2q\n", mode: 0o644)
        let password = try scratch.write("pw", "S3cret\n", mode: 0o604)
        let config = try scratch.write("e.conf", """
            [notify]
            url = https://ntfy.sh/earshot-hall-2b9x
            url_file = \(urls)
            [mqtt]
            enabled = true
            username = earshot
            password_file = \(password)

            """, mode: 0o644)
        var configuration = try DaemonConfiguration.parse(fileAt: config, required: true)
        try configuration.readNotifyURLs()
        #expect(configuration.warnings() == [
            "\(config):2: [notify] url: every local user can read \(config), mode 0644, and a notification URL is a password to your alerts (move the URLs to a file readable by earshotd's user alone, e.g. chown root:earshot and chmod 640, and name it with [notify] url_file)",
            "\(config):7: [mqtt] password_file = \(password): every local user can read it, mode 0604 (make it readable by earshotd's user alone: chown root:earshot and chmod 640)",
            "\(config):3: [notify] url_file = \(urls): every local user can read it, mode 0644 (make it readable by earshotd's user alone: chown root:earshot and chmod 640)",
        ])
        for path in [config, urls, password] { #expect(chmod(path, 0o640) == 0) }
        #expect(configuration.warnings() == [])
        // The url_file alone in a world-readable configuration: nothing secret is in the file itself.
        #expect(chmod(config, 0o644) == 0)
        try "[notify]\nurl_file = \(urls)\n".write(toFile: config, atomically: false, encoding: .utf8)
        var fileOnly = try DaemonConfiguration.parse(fileAt: config, required: true)
        try fileOnly.readNotifyURLs()
        #expect(fileOnly.warnings() == [])
    }

    @Test("a secret file others may read but cannot reach (a 0644 file in a 0750 directory) is not warned about, nor a configuration there (audit 14 F4)")
    func unreachableSecretsDoNotWarn() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let directory = scratch.file("sec")
        #expect(mkdir(directory, 0o750) == 0 && chmod(directory, 0o750) == 0)
        let urls = directory + "/urls"
        let config = directory + "/e.conf"
        try "https://ntfy.sh/earshot-kitchen-7f3k2q\n".write(toFile: urls, atomically: false, encoding: .utf8)
        try "[notify]\nurl = https://ntfy.sh/earshot-hall-2b9x\nurl_file = \(urls)\n".write(toFile: config, atomically: false, encoding: .utf8)
        #expect(chmod(urls, 0o644) == 0 && chmod(config, 0o644) == 0)
        var configuration = try DaemonConfiguration.parse(fileAt: config, required: true)
        try configuration.readNotifyURLs()
        #expect(SecretFile.readableByEveryone(urls) == nil)
        #expect(configuration.warnings() == [])
        // The directory opened to others: both are said, with the mode.
        #expect(chmod(directory, 0o751) == 0)
        #expect(SecretFile.readableByEveryone(urls) == 0o644)
        #expect(configuration.warnings() == [
            "\(config):2: [notify] url: every local user can read \(config), mode 0644, and a notification URL is a password to your alerts (move the URLs to a file readable by earshotd's user alone, e.g. chown root:earshot and chmod 640, and name it with [notify] url_file)",
            "\(config):3: [notify] url_file = \(urls): every local user can read it, mode 0644 (make it readable by earshotd's user alone: chown root:earshot and chmod 640)",
        ])
        // Through a symbolic link, the directories above the file it names count.
        #expect(chmod(directory, 0o750) == 0)
        #expect(symlink(urls, scratch.file("link")) == 0)
        #expect(SecretFile.readableByEveryone(scratch.file("link")) == nil)
    }

    @Test("the service's user is the User= of the installed earshotd units, drop-ins included; none without units, masked or run as root")
    func serviceUsersFromUnits() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let vendor = scratch.file("lib"), local = scratch.file("etc")
        for directory in [vendor, local] { #expect(mkdir(directory, 0o755) == 0) }
        #expect(ServiceUnits.users(in: [local, vendor]) == [])
        // The units this repository ships, as the package installs them.
        for name in ServiceUnits.names {
            let shipped = TestPaths.packageRoot.appendingPathComponent("systemd/\(name)").path
            #expect(Self.copyfile(shipped, to: vendor + "/" + name))
        }
        #expect(ServiceUnits.user(ofUnit: "earshotd.service", in: [local, vendor]) == "earshot")
        #expect(ServiceUnits.users(in: [local, vendor]) == ["earshot"])
        // `systemctl edit earshotd`: a drop-in in /etc runs it as root; the instances still run as earshot.
        #expect(mkdir(local + "/earshotd.service.d", 0o755) == 0)
        try "[Service]\nUser=root\n".write(toFile: local + "/earshotd.service.d/override.conf", atomically: false, encoding: .utf8)
        #expect(ServiceUnits.user(ofUnit: "earshotd.service", in: [local, vendor]) == "root")
        #expect(ServiceUnits.users(in: [local, vendor]) == ["earshot"])
        // An empty User= is root too; a drop-in of the same name in a later directory is hidden by the earlier one.
        #expect(mkdir(vendor + "/earshotd@.service.d", 0o755) == 0)
        try "[Service]\nUser=nobody\n".write(toFile: vendor + "/earshotd@.service.d/override.conf", atomically: false, encoding: .utf8)
        #expect(ServiceUnits.users(in: [local, vendor]) == ["nobody"])
        #expect(mkdir(local + "/earshotd@.service.d", 0o755) == 0)
        try "[Service]\n# run as root\nUser=\n".write(toFile: local + "/earshotd@.service.d/override.conf", atomically: false, encoding: .utf8)
        #expect(ServiceUnits.user(ofUnit: "earshotd@.service", in: [local, vendor]) == "")
        #expect(ServiceUnits.users(in: [local, vendor]) == [])
        // Masked (a link to /dev/null in /etc): no such service.
        #expect(unlink(local + "/earshotd.service.d/override.conf") == 0)
        #expect(ServiceUnits.user(ofUnit: "earshotd.service", in: [local, vendor]) == "earshot")
        #expect(symlink("/dev/null", local + "/earshotd.service") == 0)
        #expect(ServiceUnits.user(ofUnit: "earshotd.service", in: [local, vendor]) == nil)
        // SYSTEMD_UNIT_PATH as systemd reads it: an empty item stands for the default directories.
        #expect(ServiceUnits.directories(unitPath: nil) == ServiceUnits.defaultDirectories)
        #expect(ServiceUnits.directories(unitPath: "/a:/b") == ["/a", "/b"])
        #expect(ServiceUnits.directories(unitPath: "/a:") == ["/a"] + ServiceUnits.defaultDirectories)
    }

    static func copyfile(_ source: String, to destination: String) -> Bool {
        (try? FileManager.default.copyItem(atPath: source, toPath: destination)) != nil
    }

    @Test("earshotd --check-config prints the warning for a world-readable url_file and exits 0", .needsEarshotdBuilt)
    func checkConfigWarnsWorldReadable() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let urls = try scratch.write("urls", "https://ntfy.sh/earshot-kitchen-7f3k2q\n", mode: 0o644)
        let config = try scratch.write("e.conf", "[output]\nsocket = \(scratch.file("e.sock"))\n[notify]\nurl_file = \(urls)\n", mode: 0o644)
        let run = try #require(try EarshotdRun.run(["--config", config, "--check-config"]))
        #expect(run.status == 0)
        #expect(run.error == "earshotd: warning: \(config):4: [notify] url_file = \(urls): every local user can read it, mode 0644 (make it readable by earshotd's user alone: chown root:earshot and chmod 640)\n")
        #expect(run.output == "earshotd: configuration OK (watching smoke_alarm, fire_alarm, co_alarm, baby_cry, glass_break)\n")
    }

    @Test("whether a user can read a secret file: the file's owner, group and mode, and each directory above",
          .enabled(if: geteuid() == 0, "needs root, to give files to other owners and check them for the user nobody"))
    func secretFileReadableByUser() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let password = try scratch.write("pw", "S3cret\n", mode: 0o600)
        var configuration = try DaemonConfiguration.parse(
            "[mqtt]\nenabled = true\nusername = u\npassword_file = \(password)\n", source: "m.conf")
        try configuration.readMQTTPassword()
        #expect(throws: EarshotError(.config, "m.conf:4: [mqtt] password_file = \(password): nobody, the user the service runs as, cannot read it: owner root, group root, mode 0600 (chown root:nogroup and chmod 640 it)")) {
            try configuration.checkSecretFiles(readableBy: "nobody")
        }
        let nogroup = try #require(getgrnam("nogroup")).pointee.gr_gid
        #expect(chown(password, 0, nogroup) == 0 && chmod(password, 0o640) == 0)
        try configuration.checkSecretFiles(readableBy: "nobody")
        #expect(chmod(scratch.path, 0o700) == 0)
        #expect(throws: EarshotError(.config, "m.conf:4: [mqtt] password_file = \(password): nobody, the user the service runs as, cannot read it: the directory \(scratch.path) (owner root, group root, mode 0700) does not let it through (let nobody through that directory, e.g. chmod o+x it, or move the file to /etc/earshot)")) {
            try configuration.checkSecretFiles(readableBy: "nobody")
        }
        // Root reads anything; a user that does not exist has nothing to check.
        try configuration.checkSecretFiles(readableBy: "root")
        try configuration.checkSecretFiles(readableBy: "no-such-user-earshot-test")
        // Without [mqtt] enabled the password is never read: nothing to check.
        let disabled = try DaemonConfiguration.parse("[mqtt]\nusername = u\npassword_file = \(password)\n", source: "m.conf")
        try disabled.checkSecretFiles(readableBy: "nobody")
    }

    @Test("earshotd --check-config run as root refuses a url_file the service's user earshot cannot read, exit 78, only when the installed units run earshotd as earshot (trial 13 D3, audit 14 F4)",
          .needsEarshotdBuilt,
          .enabled(if: geteuid() == 0 && getpwnam(DaemonConfiguration.serviceUser) != nil,
                   "needs root and the user earshot (the package's service user), as sudo earshotd --check-config on an installed system"))
    func rootCheckConfigChecksServiceUser() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let urls = try scratch.write("urls", "https://ntfy.sh/earshot-kitchen-7f3k2q\n", mode: 0o600)
        let config = try scratch.write("e.conf", "[output]\nsocket = \(scratch.file("e.sock"))\n[notify]\nurl_file = \(urls)\n", mode: 0o644)
        // The package's units, installed in a unit directory of their own (SYSTEMD_UNIT_PATH).
        let units = scratch.file("units")
        #expect(mkdir(units, 0o755) == 0)
        for name in ServiceUnits.names {
            #expect(Self.copyfile(TestPaths.packageRoot.appendingPathComponent("systemd/\(name)").path, to: units + "/" + name))
        }
        let installed = ["SYSTEMD_UNIT_PATH": units]
        let refused = try #require(try EarshotdRun.run(["--config", config, "--check-config"], environment: installed))
        #expect(refused.status == 78)
        #expect(refused.error == "earshotd: \(config):4: [notify] url_file = \(urls): earshot, the user the service runs as, cannot read it: owner root, group root, mode 0600 (chown root:earshot and chmod 640 it)\n")
        // Units changed to run earshotd as root (systemctl edit), or no units at all: root reads it, nothing to refuse.
        for name in ServiceUnits.names {
            #expect(mkdir(units + "/\(name).d", 0o755) == 0)
            try "[Service]\nUser=root\n".write(toFile: units + "/\(name).d/root.conf", atomically: false, encoding: .utf8)
        }
        for environment in [installed, ["SYSTEMD_UNIT_PATH": scratch.file("no-units")]] {
            let asRoot = try #require(try EarshotdRun.run(["--config", config, "--check-config"], environment: environment))
            #expect(asRoot.status == 0, "\(asRoot.error)")
            #expect(asRoot.error == "")
        }
        for name in ServiceUnits.names { #expect(unlink(units + "/\(name).d/root.conf") == 0) }
        try ServiceSecretFile.write("https://ntfy.sh/earshot-kitchen-7f3k2q\n", to: urls)
        let passed = try #require(try EarshotdRun.run(["--config", config, "--check-config"], environment: installed))
        #expect(passed.status == 0, "\(passed.error)")
        #expect(passed.error == "")
    }
}
