import Synchronization
import Dispatch
import Foundation
import Testing

import EarshotSupport
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// The parts of full Foundation the Earshot module replaced (see Sources/EarshotSupport/Portability.swift and
/// JSONParsing.swift), checked against full Foundation itself, which the tests still import.
@Suite("Foundation-free helpers")
struct PortabilityTests {
    @Test("JSON parsing agrees with JSONSerialization on values, escapes, numbers and key order")
    func parsesLikeJSONSerialization() throws {
        let text = #" {"type":"status","n":-12,"big":12345678901234,"x":0.25,"e":1E3,"neg":-0.5e-2,"t":true,"f":false,"z":null,"#
            + #""s":"a\"b\\c\/d\n\t\u00e9\ud83d\udd25","list":[1,[2,{"k":"v"}],[]],"o":{}} "#
        let value = try JSONValue.parse(text)
        #expect(value.objectValue?.entries.map(\.key) == ["type", "n", "big", "x", "e", "neg", "t", "f", "z", "s", "list", "o"])
        #expect(value["type"] == .string("status"))
        #expect(value["n"] == .int(-12))
        #expect(value["big"] == .int(12_345_678_901_234))
        #expect(value["x"]?.doubleValue == 0.25)
        #expect(value["e"] == .number(1000, decimals: nil))
        #expect(value["e"]?.intValue == 1000)
        #expect(value["neg"]?.doubleValue == -0.005)
        #expect(value["t"]?.boolValue == true && value["f"]?.boolValue == false && value["z"]?.isNull == true)
        let reference = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(value["s"]?.stringValue == reference["s"] as? String)
        #expect(value["s"]?.stringValue == "a\"b\\c/d\n\té🔥")
        #expect(value["list"]?.arrayValue?[1].arrayValue?[1]["k"]?.stringValue == "v")
        #expect(value["list"]?.arrayValue?[2] == .array([]) && value["o"] == .object(JSONObject()))
        // What we write, we read back.
        let written: JSONValue = ["a": "x\u{01}\"y", "b": [1, 2.5, nil, false]]
        #expect(try JSONValue.parse(written.encoded).encoded == written.encoded)
        #expect(try JSONValue.parse(written.encoded)["a"]?.stringValue == "x\u{01}\"y")
    }

    @Test("JSON errors name the problem and the byte; nesting is bounded")
    func rejectsBadJSON() {
        func failure(_ text: String) -> JSONParseError? {
            do { _ = try JSONValue.parse(text); return nil } catch { return error }
        }
        #expect(failure("") == JSONParseError(reason: "unexpected end of the text", offset: 0))
        #expect(failure("{\"a\":1,}") == JSONParseError(reason: "expected a key", offset: 7))
        #expect(failure("[1 2]") == JSONParseError(reason: "expected ',' or ']'", offset: 3))
        #expect(failure("{\"a\" 1}") == JSONParseError(reason: "expected ':'", offset: 5))
        #expect(failure("01") == JSONParseError(reason: "unexpected text after the value", offset: 1))
        #expect(failure("-") == JSONParseError(reason: "unexpected end of the text", offset: 1))
        #expect(failure("1.") == JSONParseError(reason: "bad number", offset: 2))
        #expect(failure("\"a\nb\"") == JSONParseError(reason: "control character in a string", offset: 2))
        #expect(failure("\"\\ud83d\"") == JSONParseError(reason: "lone surrogate escape", offset: 7))
        #expect(failure("\"\\x\"") == JSONParseError(reason: "bad escape", offset: 3))
        #expect(failure("tru") == JSONParseError(reason: "unexpected end of the text", offset: 0))
        #expect(failure("nul!") == JSONParseError(reason: "unexpected character", offset: 0))
        do {
            _ = try JSONValue.parse([0x22, 0xFF, 0x22] as [UInt8])
            Issue.record("invalid UTF-8 was accepted")
        } catch {
            #expect(error == JSONParseError(reason: "invalid UTF-8 in a string", offset: 3))
        }
        let deep = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        #expect(failure(deep) == nil)
        let tooDeep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        #expect(failure(tooDeep) == JSONParseError(reason: "nesting deeper than 64", offset: 64))
    }

    @Test("String(cFormat:) formats as String(format:) for the conversions Earshot uses")
    func cFormatMatchesFoundation() {
        for value in [0.0, 0.005, -1.25, 12.345678, 1e9, -0.0004] {
            #expect(String(cFormat: "%.2f", value) == String(format: "%.2f", value))
            #expect(String(cFormat: "%.3f s", value) == String(format: "%.3f s", value))
        }
        #expect(String(cFormat: "%04d-%02d-%02d %02d:%02d:%02d", 2026, 11, 30, 7, 5, 9) == "2026-11-30 07:05:09")
        #expect(String(cFormat: "format 0x%x", UInt32(0x10020)) == "format 0x10020")
        #expect(String(cFormat: "%.1f%%", 97.25) == String(format: "%.1f%%", 97.25))
        let long = String(cFormat: "%0300d", 7)
        #expect(long.count == 300 && long.hasSuffix("7"))
    }

    @Test("Trimming and paths agree with Foundation")
    func trimmingAndPaths() {
        for text in ["  a b \t", "\n x\n", "", "   ", "\u{00A0}y\u{2003}", "z"] {
            #expect(text.trimmingSpaces() == text.trimmingCharacters(in: .whitespaces), "\(Array(text.unicodeScalars))")
            #expect(text.trimmingWhitespace() == text.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        for path in ["/var/lib/earshot/history.sqlite", "/history.sqlite", "history.sqlite", "a/b/", "/"] {
            let expected = (path as NSString).deletingLastPathComponent
            #expect(parentDirectory(of: path) == (expected.isEmpty ? "." : expected), "\(path)")
        }
        #expect(joinedPath("/var/lib/earshot", "x.svg") == "/var/lib/earshot/x.svg")
        #expect(joinedPath("/var/lib/earshot/", "x.svg") == "/var/lib/earshot/x.svg")
    }

    @Test("Local time from glibc has the offset Foundation's TimeZone.current gives, through a year")
    func localTimeMatchesFoundation() {
        for day in stride(from: 0, to: 366, by: 7) {
            let date = Date(timeIntervalSince1970: 1_767_225_600 + Double(day) * 86_400 + 3_600 * 13)
            #expect(LocalTime.zone(at: date).secondsFromGMT(for: date) == TimeZone.current.secondsFromGMT(for: date))
        }
    }

    @Test("A thread started by startThread runs, under its name (at most 15 bytes)")
    func threads() throws {
        let name = Mutex<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        try startThread(named: "earshot-test-thread-long-name") {
            var buffer = [CChar](repeating: 0, count: 32)
            let descriptor = open("/proc/thread-self/comm", O_RDONLY)
            let count = read(descriptor, &buffer, 31)
            close(descriptor)
            let text = String(decoding: buffer.prefix(max(0, count)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            name.withLock { $0 = text }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(name.withLock { $0 } == "earshot-test-th\n")
    }
}
