import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// JSON encoding of event lines: escaping, rounding, timestamps.
@Suite("EventServer JSON")
struct EventServerJSONTests {
    @Test("Labels with commas, quotes, backslashes and control characters are escaped and read back unchanged")
    func escaping() throws {
        let label = "Smoke detector, \"smoke\" alarm \\ tab\t new\nline \u{01} é 🔥"
        let event = DetectionEvent.onset(.init(group: "g", classLabel: label, confidence: 0.5, start: 1, decisionTime: 2))
        let line = EventJSON.object(for: event, time: SocketTestSupport.wallClock).encoded
        #expect(line.contains(#""class":"Smoke detector, \"smoke\" alarm \\ tab\t new\nline \u0001 é 🔥","#))
        #expect(!line.contains("\n"))
        let parsed = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        #expect(parsed?["class"] as? String == label)
    }

    @Test("Confidences round to 4 decimals, times to 3; trailing zeros trimmed; non-finite numbers are null")
    func numbers() {
        #expect(JSONValue.format(0.81236, decimals: 4) == "0.8124")
        #expect(JSONValue.format(Double(Float(0.7)), decimals: 4) == "0.7")
        #expect(JSONValue.format(12.4800001, decimals: 3) == "12.48")
        #expect(JSONValue.format(1, decimals: 3) == "1.0")
        #expect(JSONValue.format(-0.00001, decimals: 3) == "0.0")
        #expect(JSONValue.format(-2.5, decimals: 3) == "-2.5")
        #expect(JSONValue.format(.nan, decimals: 3) == "null")
        #expect(JSONValue.format(.infinity, decimals: nil) == "null")
        #expect(JSONValue.format(0.1, decimals: nil) == "0.1")
        #expect(JSONValue.format(42, decimals: nil) == "42.0")
        #expect(JSONValue.format(1e-5, decimals: nil) == "1e-05")
        let object: JSONValue = ["a": 1, "b": [true, nil, "x"], "c": 2.5]
        #expect(object.encoded == #"{"a":1,"b":[true,null,"x"],"c":2.5}"#)
    }

    @Test("JSONObject keeps insertion order; setting a key again replaces it in place; nil removes it")
    func objectOrder() {
        var object: JSONObject = ["z": 1, "a": 2]
        object["m"] = 3
        object["z"] = 4
        #expect(object.encoded == #"{"z":4,"a":2,"m":3}"#)
        object["a"] = nil
        #expect(object.encoded == #"{"z":4,"m":3}"#)
    }

    @Test("Timestamps are ISO 8601 UTC with milliseconds, truncated")
    func timestamps() {
        #expect(EventJSON.timestamp(SocketTestSupport.wallClock) == "2026-11-30T16:45:12.345Z")
        #expect(EventJSON.timestamp(Date(timeIntervalSince1970: 1_796_057_112.9999)) == "2026-11-30T16:45:12.999Z")
        #expect(EventJSON.timestamp(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        #expect(EventJSON.timestamp(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59.500Z")
    }

    @Test("Health details follow state and message; reserved keys in details are ignored")
    func healthLine() {
        let health = HealthEvent(
            state: .captureUnavailable, message: "cannot open capture device \"hw:2,0\": Device or resource busy",
            details: ["type": "x", "device": "hw:2,0", "retry_seconds": .number(4, decimals: 1), "time": "y"])
        #expect(EventJSON.object(for: health, time: SocketTestSupport.wallClock).encoded
            == #"{"type":"health","state":"capture_unavailable","message":"cannot open capture device \"hw:2,0\": Device or resource busy","device":"hw:2,0","retry_seconds":4.0,"time":"2026-11-30T16:45:12.345Z"}"#)
    }

    @Test("Requests parse into subscribe and status; everything else is an error message")
    func requests() {
        func parse(_ text: String) -> EventRequest.Parsed { EventRequest.parse(Array(text.utf8)) }
        #expect(parse(#" {"subscribe":["a","b"]} "#) == .request(.subscribe(["a", "b"])))
        #expect(parse(#"{"subscribe":"a"}"#) == .request(.subscribe(["a"])))
        #expect(parse(#"{"status":true}"#) == .request(.status))
        #expect(parse(#"{"cmd":"status"}"#) == .request(.status))
        #expect(parse(#"{"status":false}"#) == .failure(#"unknown request (send {"subscribe":["group",...]} or {"status":true})"#))
        #expect(parse(#"{"cmd":5}"#) == .failure(#"unknown command 5 (supported: "status", "listen")"#))
        #expect(parse("\r") == .empty)
        #expect(parse(#"{"a":"[[[[[[[[[[[[[[[[[[[[[[["}"#) == .failure(#"unknown request (send {"subscribe":["group",...]} or {"status":true})"#))
        #expect(EventRequest.parse([0xFF, 0xFE]) == .failure(#"malformed request: not valid JSON (send {"subscribe":["group",...]} or {"status":true})"#))
    }
}
