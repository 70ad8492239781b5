// The Earshot library: Sound Analysis for Linux. `import Earshot` brings in the modules a program that classifies
// sound needs, each of which can also be imported alone:
// - EarshotSupport: errors (`EarshotError`), JSON values, small portability helpers.
// - EarshotAudio: decoding (libsndfile) and resampling to 16 kHz (soxr).
// - EarshotCapture: ALSA capture, the lock-free sample ring, real-time file sources.
// - EarshotModel: the log-mel front end, YAMNet and custom classifier heads.
// - EarshotAnalysis: `ClassifySoundRequest`, `AudioFileAnalyzer`, `AudioStreamAnalyzer`, `ClassificationResult`.
// The daemon's layers (detection, outputs, service) and the command line's tools are not part of this product.
@_exported import EarshotSupport
@_exported import EarshotAudio
@_exported import EarshotCapture
@_exported import EarshotModel
@_exported import EarshotAnalysis
