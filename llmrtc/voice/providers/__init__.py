"""Speech engines: offline (Silero, faster-whisper, piper, espeak-ng) and OpenAI."""
