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
    @Test("an alarm onset and end print the pattern, cycles, tone, confidence and the classifier's own score, not peak ?%, mean ?% or \"?\"")
    func alarmEnd() {
        let line = #"{"type":"detection_end","group":"smoke_alarm","source":"pattern+classifier","pattern":"T3","cycles":2,"tone_hz":3057,"tone_dbfs":-20.1,"confidence":0.9954,"classifier_score":0.954,"class":"Smoke detector, smoke alarm","start":0.18,"end":11.52,"duration":11.34,"reason":"pattern_stopped","time":"2026-12-06T10:00:00.000Z"}"#
        #expect(EventTextFormat.format(line: line, timeZone: TimeZone(identifier: "UTC")!)
                == #"2026-12-06 10:00:00  smoke_alarm ended after 11.34 s: T3 pattern, 2 cycles at 3057 Hz, confidence 100%, classifier "Smoke detector, smoke alarm" 95% (stream 0.18-11.52 s)"#)
        let tone = #"{"type":"detection_end","group":"smoke_alarm","source":"tone+classifier","cycles":0,"tone_hz":3100,"tone_dbfs":-20.1,"confidence":0.88,"classifier_score":0.6,"class":"Smoke detector, smoke alarm","start":1,"end":20,"duration":19,"reason":"pattern_stopped"}"#
        #expect(EventTextFormat.format(line: tone) == #"smoke_alarm ended after 19.00 s: alarm tone at 3100 Hz, confidence 88%, classifier "Smoke detector, smoke alarm" 60% (stream 1.00-20.00 s)"#)
        // Onsets the same way; a pattern heard with no window classified has no classifier part, and a chirp series
        // is heard, not started (trial 8 #7).
        let onset = #"{"type":"detection","group":"smoke_alarm","source":"pattern","pattern":"T3","cycles":1,"tone_hz":3057,"tone_dbfs":-45,"confidence":0.8,"stream_time":0.176}"#
        #expect(EventTextFormat.format(line: onset) == "smoke_alarm started: T3 pattern, 1 cycle at 3057 Hz, confidence 80% (stream 0.18 s)")
        let chirp = #"{"type":"detection","group":"alarm_chirp","source":"pattern","pattern":"chirp","cycles":3,"tone_hz":3200,"tone_dbfs":-30,"confidence":0.9,"classifier_score":0.0002,"class":"Fire alarm","stream_time":354.76}"#
        #expect(EventTextFormat.format(line: chirp) == #"alarm_chirp heard: chirp pattern, 3 chirps at 3200 Hz, confidence 90%, classifier "Fire alarm" 0% (stream 354.76 s)"#)
        let classifier = #"{"type":"detection_end","group":"baby_cry","class":"Baby cry, infant cry","start":2.4,"end":9.6,"duration":7.2,"peak_confidence":0.9983,"mean_confidence":0.9874,"windows":9,"reason":"hold_elapsed"}"#
        #expect(EventTextFormat.format(line: classifier) == #"baby_cry ended after 7.20 s: "Baby cry, infant cry" peak 100%, mean 99% (stream 2.40-9.60 s)"#)
    }
}

