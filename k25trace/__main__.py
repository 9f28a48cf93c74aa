from k25trace.cli import main

main()
