import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("Text lines of alarm ends")
struct AlarmEndTextTests {
    @Test("an alarm end prints its pattern, cycles, tone and confidence, not peak ?%, mean ?%")
    func alarmEnd() {
        let line = #"{"type":"detection_end","group":"smoke_alarm","source":"pattern+classifier","pattern":"T3","cycles":2,"tone_hz":3057,"tone_dbfs":-20.1,"confidence":0.9954,"classifier_score":0.954,"class":"Smoke detector, smoke alarm","start":0.18,"end":11.52,"duration":11.34,"reason":"pattern_stopped","time":"2026-12-06T10:00:00.000Z"}"#
        #expect(EventTextFormat.format(line: line, timeZone: TimeZone(identifier: "UTC")!)
                == #"2026-12-06 10:00:00  smoke_alarm ended after 11.34 s: "Smoke detector, smoke alarm" T3 pattern, 2 cycles at 3057 Hz, confidence 100% (stream 0.18-11.52 s)"#)
        let tone = #"{"type":"detection_end","group":"smoke_alarm","source":"tone+classifier","cycles":0,"tone_hz":3100,"tone_dbfs":-20.1,"confidence":0.88,"classifier_score":0.6,"class":"Smoke detector, smoke alarm","start":1,"end":20,"duration":19,"reason":"pattern_stopped"}"#
        #expect(EventTextFormat.format(line: tone) == #"smoke_alarm ended after 19.00 s: "Smoke detector, smoke alarm" alarm tone at 3100 Hz, confidence 88% (stream 1.00-20.00 s)"#)
        let classifier = #"{"type":"detection_end","group":"baby_cry","class":"Baby cry, infant cry","start":2.4,"end":9.6,"duration":7.2,"peak_confidence":0.9983,"mean_confidence":0.9874,"windows":9,"reason":"hold_elapsed"}"#
        #expect(EventTextFormat.format(line: classifier) == #"baby_cry ended after 7.20 s: "Baby cry, infant cry" peak 100%, mean 99% (stream 2.40-9.60 s)"#)
    }
}

