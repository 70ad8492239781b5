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

    @Test("an end the sound did not make says what did, in every readable line: subscribe text, the journal, the history, the ntfy title (trial 11 #2)")
    func endReasonInWords() throws {
        // Every reason the README documents has words, or is an ordinary end (the sound stopped) with none.
        #expect(DetectionEvent.EndReason.streamGap.words == "capture lost")
        #expect(DetectionEvent.EndReason.streamEnd.words == "monitoring stopped")
        #expect(DetectionEvent.EndReason.reload.words == "configuration reloaded")
        #expect(DetectionEvent.EndReason.holdElapsed.words == nil)
        #expect(DetectionEvent.EndReason.patternStopped.words == nil)
        #expect(DetectionEvent.EndReason.pointEvent.words == nil)

        let gap = #"{"type":"detection_end","group":"smoke_alarm","source":"pattern+classifier","pattern":"T3","cycles":2,"tone_hz":3131,"tone_dbfs":-20.5,"confidence":0.9996,"classifier_score":0.96,"class":"Smoke detector, smoke alarm","start":999.56,"end":1009.52,"duration":9.96,"reason":"stream_gap","time":"2026-12-07T04:32:26.000Z"}"#
        #expect(EventTextFormat.format(line: gap, timeZone: TimeZone(identifier: "UTC")!)
                == #"2026-12-07 04:32:26  smoke_alarm ended after 9.96 s (capture lost: the sound may still be going on): T3 pattern, 2 cycles at 3131 Hz, confidence 100%, classifier "Smoke detector, smoke alarm" 96% (stream 999.56-1009.52 s)"#)
        let reload = #"{"type":"detection_end","group":"baby_cry","class":"Baby cry, infant cry","start":2.4,"end":9.6,"duration":7.2,"peak_confidence":0.9983,"mean_confidence":0.9874,"windows":9,"reason":"reload"}"#
        #expect(EventTextFormat.format(line: reload) == #"baby_cry ended after 7.20 s (configuration reloaded): "Baby cry, infant cry" peak 100%, mean 99% (stream 2.40-9.60 s)"#)

        let alarm = AlarmEvent(kind: .end, group: "smoke_alarm", source: .patternAndClassifier, pattern: .t3, cycles: 2,
                               toneHz: 3131, toneLevelDBFS: -20.5, classifierScore: 0.96,
                               classifierClass: "Smoke detector, smoke alarm", start: 999.56, time: 1009.52, reason: .streamGap)
        #expect(alarm.message == "smoke_alarm ended (capture lost: the sound may still be going on): T3 pattern at 3131 Hz from 999.56 s to 1009.52 s (2 cycles)")
        let offset = DetectionEvent.Offset(group: "baby_cry", classLabel: "Baby cry, infant cry", start: 2.4, end: 9.6,
                                           peakConfidence: 0.91, meanConfidence: 0.72, positiveWindows: 9, reason: .reload)
        #expect(JournalSink.message(for: .offset(offset)) == #"baby_cry ended (configuration reloaded): "Baby cry, infant cry" from 2.40 s to 9.60 s (7.20 s, peak confidence 0.91, mean 0.72)"#)

        let ntfy = NotificationMessage(object: try #require(JSONValue.parse(gap).objectValue), group: "smoke_alarm", kind: .end,
                                       format: .ntfy, node: "kitchen", time: Date(timeIntervalSince1970: 0))
        #expect(ntfy.headers.first == "Title: kitchen: Smoke alarm: capture lost")
    }
}
