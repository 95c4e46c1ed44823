from asyncdeploy.cli import main

main()
