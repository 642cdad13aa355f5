module golang.org/x/crypto

go 1.26.0

require (
	golang.org/x/net v0.60.0 // tagx:ignore
	golang.org/x/sys v0.49.0
	golang.org/x/term v0.47.0
)

require golang.org/x/text v0.43.0 // indirect
