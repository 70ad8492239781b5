import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot devices`: list ALSA capture PCMs and the sound cards' capture devices.
enum DevicesCommand {
    static let usage = "usage: earshot devices"

    static func run(_ arguments: [String]) -> Int32 {
        if arguments == ["--help"] || arguments == ["-h"] {
            print(usage)
            return 0
        }
        guard arguments.isEmpty else {
            FileHandle.standardError.write(Data("earshot: devices takes no arguments (\(usage))\n".utf8))
            return 64
        }
        do {
            let text = CaptureDeviceReport.text(pcms: try CaptureDevice.capturePCMs(), cards: SoundCard.all())
            StandardOutput.write(text)
            return 0
        } catch let error as EarshotError {
            FileHandle.standardError.write(Data("earshot: \(error.message)\n".utf8))
            return error.exitStatus
        } catch {
            FileHandle.standardError.write(Data("earshot: \(error)\n".utf8))
            return 69
        }
    }
}
