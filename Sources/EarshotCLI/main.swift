import Earshot
import Foundation

// `earshot`: the command line. Argument parsing and wiring only; the work lives in the Earshot library.

let usage = """
usage: earshot <command> [options]

commands:
  analyze FILE... [--model FILE] [--format text|jsonl|csv] [--top K] [--window S] [--overlap F] [--summary]
                                  classify sound files, one result per window
  train DATA_DIR --output FILE [--classifier logistic|mlp] [--validation F] [--seed N] [--folds K]
                                  train a custom classifier from one folder of recordings per label
  enroll --label NAME [--count 5] [--device PCM | --from FILE...] --output FILE
                                  teach earshot one sound by recording it a few times (or from files)
  subscribe [--socket PATH] [--group G]...
                                  print the daemon's detection events as they arrive
  classes                         list the built-in classifier's AudioSet class labels
  devices                         list ALSA capture devices
  eval [--manifest FILE] [--no-synthetic] [--no-classifier] [--only TEXT]
                                  measure the smoke/CO alarm detector: recall, false events, time to detection
  bench [--quick] [--no-daemon] [--layers] [--json]
                                  measure inference, file analysis and the daemon on this machine
  history [--since 8h] [--group G]... [--format text|jsonl|csv] [--db PATH]
                                  list the detections earshotd stored
  report --snore FILE [--json OUT] [--svg OUT] [--png OUT]
                                  snore report of a recording (minutes, episodes, loudness, 5-minute timeline)
  report --from-svg SVG --png OUT render a snore report's SVG chart (e.g. the daemon's) as PNG
  sleep start|stop|status [--socket PATH]
                                  control the daemon's sleep session (snore monitoring and report)
  eval-snore SNORING_DIR NON_SNORING_DIR
                                  measure the snore detector on labelled clips
  help                            show this text
"""

var arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else {
    FileHandle.standardError.write(Data((usage + "\n").utf8))
    exit(64)
}
arguments.removeFirst()

let status: Int32
switch command {
case "analyze": status = AnalyzeCommand.run(arguments)
case "train": status = TrainCommand.run(arguments)
case "enroll": status = EnrollCommand.run(arguments)
case "subscribe": status = SubscribeCommand.run(arguments)
case "classes": status = ClassesCommand.run(arguments)
case "devices": status = DevicesCommand.run(arguments)
case "history": status = HistoryCommand.run(arguments)
case "report": status = ReportCommand.run(arguments)
case "sleep": status = SleepCommand.run(arguments)
case "eval-snore": status = EvalSnoreCommand.run(arguments)
case "eval": status = EvalCommand.run(arguments)
case "bench": status = BenchCommand.run(arguments)
case "help", "--help", "-h":
    print(usage)
    status = 0
default:
    FileHandle.standardError.write(Data("earshot: unknown command \"\(command)\" (run `earshot help` for the list)\n".utf8))
    status = 64
}
exit(status)
